#!/usr/bin/env bash
# The user's path on this machine, end to end, in a few minutes on 2 cores:
#   1. spm_train: a SentencePiece model (BPE, 2,000 pieces) on Debian's license texts
#      (/usr/share/common-licenses, always installed);
#   2. hdp tokenize: those texts to a Megatron indexed dataset (one document a file, an
#      end-of-document id each);
#   3. hdp run: a job of 2 agents x 1 worker trains a LLaMA given as a Hugging Face config.json
#      (--model-config) on it for 150 steps, with the loss of five held-out license texts every 50
#      steps (--eval-data; eval_loss in the log);
#   4. hdp export: the last checkpoint as config.json + model.safetensors;
#   5. hdp sample: text from the export, prompt and output through the tokenizer.
# Usage: scripts/user-path.sh [WORK_DIR] (scripts/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" --target hdp hdp-tokenize
hdp=$PWD/build/bin/hdp
work=${1:-$(mktemp -d /tmp/hdp-user-path.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "user path: working in $work"

# 1. The tokenizer. The texts: every license file (symbolic links skipped), the last five held out.
rm -rf "$work/train" "$work/eval" && mkdir -p "$work/train" "$work/eval"
mapfile -t files < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
for i in "${!files[@]}"; do
  if [ "$i" -ge $((${#files[@]} - 5)) ]; then cp "${files[$i]}" "$work/eval/"; else cp "${files[$i]}" "$work/train/"; fi
done
cat "$work"/train/* > "$work/all.txt"
spm_train --input="$work/all.txt" --model_prefix="$work/m" --vocab_size=2000 --model_type=bpe \
  --character_coverage=1.0 --minloglevel=2 >/dev/null
echo "user path: tokenizer $work/m.model (2,000 pieces)"

# 2. Tokenize (training and held-out sets).
"$hdp" tokenize --tokenizer "$work/m.model" --input "$work/train" --output "$work/train_tokens" | tail -n 4
"$hdp" tokenize --tokenizer "$work/m.model" --input "$work/eval" --output "$work/eval_tokens" | tail -n 1

# 3. Train the user's model, given as a Hugging Face LlamaConfig.
cat >"$work/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 2000,
 "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "hidden_act": "silu", "attention_bias": false, "mlp_bias": false}
JSON
rm -rf "$work/run"
"$hdp" run --nodes 2 --nproc-per-node 1 --run-dir "$work/run" -- "$hdp" train --model-config "$work/config.json" \
  --data "$work/train_tokens" --eval-data "$work/eval_tokens" --eval-every 50 --eval-tokens 8192 --context 256 \
  --capacity 256 --batch-tokens 4096 --steps 150 --lr 3e-3 --checkpoint-dir "$work/ckpt" --checkpoint-every 50 \
  --log-every 25 --timeout-ms 20000 2> >(grep --line-buffered -E "step [0-9]+/|eval_loss|completed" >&2)
wait

# 4. Export, 5. sample.
rm -rf "$work/export"
"$hdp" export "$work/ckpt" --out "$work/export"
echo "user path: sample (greedy):"
"$hdp" sample "$work/export" --tokenizer "$work/m.model" --prompt "This program is free software" \
  --temperature 0 --max-new-tokens 40
