#!/usr/bin/env bash
# Throughput of `hdp tokenize` against SentencePiece's own spm_encode on the same text, in one run.
# The corpus: every plain-text file under /usr/share/doc (not binary: no NUL in the first 8000 bytes;
# valid UTF-8; not empty; not HTML/CSS/JavaScript), copied into WORK/corpus/ with its relative path.
# A SentencePiece model (BPE, vocabulary 8000) is trained by spm_train on a sample of its lines. Then
#   1. spm_encode --output_format=id over all the text, one file after another (one process, one
#      thread: the tool has no threads), ids written to a file;
#   2. hdp tokenize --threads 1 and --threads THREADS (default: nproc) over the directory tree;
#   3. hdp tokenize --threads THREADS over the same documents as one JSON-lines file;
#   4. hdp tokenize --threads THREADS --whole-documents over the tree (no chunks of lines);
# (ROUNDS rounds, default 3, each run's fastest kept) and prints tokens/s of each and the ratios. The
# script fails unless the tokens agree id by id (run 2's documents, each without the eos it ends
# with, read from PREFIX.idx and PREFIX.bin, are spm_encode's ids in order) and runs 1, 2, 3 and 4
# wrote byte-identical .bin files (and 1, 2, 4 identical .idx files).
# Usage: scripts/tokenize_bench.sh [WORK_DIR] (build hdp first; needs python3 and spm_train/spm_encode)
set -euo pipefail
cd "$(dirname "$0")/.."
hdp=${HDP:-build/bin/hdp}
threads=${THREADS:-$(nproc)}
work=${1:-$(mktemp -d /tmp/hdp-tokenize-bench.XXXXXX)}
mkdir -p "$work"
[ -x "$hdp" ] || { echo "tokenize_bench: $hdp missing (cmake --build build --target hdp)" >&2; exit 1; }

# The corpus, its concatenation (each file ending in a newline, in the walk's bytewise path order)
# and the same documents as JSON lines.
python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
root, corpus = '/usr/share/doc', os.path.join(work, 'corpus')
skip_ext = ('.html', '.htm', '.css', '.js', '.svg', '.xml', '.json')
files = []
for dirpath, dirnames, filenames in os.walk(root):
    for name in filenames:
        path = os.path.join(dirpath, name)
        if os.path.islink(path) or not os.path.isfile(path) or name.lower().endswith(skip_ext):
            continue
        try:
            data = open(path, 'rb').read()
            text = data.decode('utf-8')
        except (OSError, UnicodeDecodeError):
            continue
        if not data or b'\0' in data[:8000] or not text.strip():
            continue
        files.append((os.path.relpath(path, root).encode(), data))
files.sort()
with open(os.path.join(work, 'all.txt'), 'wb') as all_text, open(os.path.join(work, 'all.jsonl'), 'w') as jsonl:
    for rel, data in files:
        out = os.path.join(corpus.encode(), rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        open(out, 'wb').write(data)
        all_text.write(data if data.endswith(b'\n') else data + b'\n')
        jsonl.write(json.dumps({'text': data.decode('utf-8')}) + '\n')
print(f'corpus: {len(files)} files, {sum(len(d) for _, d in files) / 1e6:.1f} MB under {corpus}')
EOF

if [ ! -f "$work/m.model" ]; then
  start=$(date +%s.%N)
  spm_train --input="$work/all.txt" --model_prefix="$work/m" --vocab_size=8000 --model_type=bpe \
    --input_sentence_size=200000 --shuffle_input_sentence=true --random_seed=1 --minloglevel=2 \
    --num_threads="$threads" >/dev/null 2>&1
  echo "model: spm_train BPE, vocab 8000, on 200000 sampled lines, $(echo "$(date +%s.%N) - $start" | bc) s"
fi

seconds() { echo "$2 - $1" | bc; }
min() { if [ -z "$1" ] || [ "$(echo "$2 < $1" | bc)" -eq 1 ]; then echo "$2"; else echo "$1"; fi; }

# hdp tokenize: seconds, then its summary's "documents D, tokens T".
run_hdp() {  # label, threads, input, output, extra flags...
  local start end out
  start=$(date +%s.%N)
  out=$("$hdp" tokenize --tokenizer "$work/m.model" --input "$3" --output "$4" --threads "$2" "${@:5}" 2>"$work/$1.err")
  end=$(date +%s.%N)
  echo "$(seconds "$start" "$end") $(sed -n 's/^  documents \([0-9]*\), tokens \([0-9]*\).*/\1 \2/p' <<<"$out")"
}

# ROUNDS rounds (default 3) of every run in turn, so that another load on the machine weighs on
# all of them alike; each run's fastest round is reported.
rounds=${ROUNDS:-3}
spm_s="" t1_s="" tn_s="" js_s="" wh_s=""
for ((round = 1; round <= rounds; round++)); do
  start=$(date +%s.%N)
  spm_encode --model="$work/m.model" --output_format=id --input="$work/all.txt" >"$work/spm_ids.txt"
  spm_s=$(min "$spm_s" "$(seconds "$start" "$(date +%s.%N)")")
  read -r s t1_docs t1_tokens < <(run_hdp dir_t1 1 "$work/corpus" "$work/out_t1"); t1_s=$(min "$t1_s" "$s")
  read -r s tn_docs tn_tokens < <(run_hdp dir_tn "$threads" "$work/corpus" "$work/out_tn"); tn_s=$(min "$tn_s" "$s")
  read -r s js_docs js_tokens < <(run_hdp jsonl_tn "$threads" "$work/all.jsonl" "$work/out_jsonl"); js_s=$(min "$js_s" "$s")
  read -r s wh_docs wh_tokens < <(run_hdp whole_tn "$threads" "$work/corpus" "$work/out_whole" --whole-documents)
  wh_s=$(min "$wh_s" "$s")
  echo "round $round/$rounds: spm_encode $spm_s s, hdp t1 $t1_s s, t$threads $tn_s s, jsonl $js_s s, whole $wh_s s (fastest so far); load $(cut -d' ' -f1 /proc/loadavg)"
done
spm_tokens=$(wc -w <"$work/spm_ids.txt")

cmp -s "$work/out_t1.bin" "$work/out_tn.bin" && cmp -s "$work/out_t1.idx" "$work/out_tn.idx" \
  || { echo "tokenize_bench: 1 and $threads threads wrote different files" >&2; exit 1; }
cmp -s "$work/out_tn.bin" "$work/out_jsonl.bin" || { echo "tokenize_bench: directory and JSON lines differ" >&2; exit 1; }
cmp -s "$work/out_tn.bin" "$work/out_whole.bin" && cmp -s "$work/out_tn.idx" "$work/out_whole.idx" \
  || { echo "tokenize_bench: chunks of lines and whole documents differ" >&2; exit 1; }
if [ $((tn_tokens - tn_docs)) -ne "$spm_tokens" ]; then
  echo "tokenize_bench: token counts differ: hdp $tn_tokens - $tn_docs eos != spm_encode $spm_tokens" >&2
  exit 1
fi
# Id by id: the indexed dataset read from its layout (MMIDIDX version 1: the header, sequence
# lengths as int32, byte pointers as int64, the document index), each document's last id the eos,
# the rest equal to spm_encode's ids of the same text, in order.
python3 - "$work/out_tn" "$work/spm_ids.txt" <<'EOF'
import array, bisect, struct, sys
prefix, spm_path = sys.argv[1], sys.argv[2]
idx = open(prefix + '.idx', 'rb').read()
if idx[:9] != b'MMIDIDX\x00\x00' or struct.unpack_from('<Q', idx, 9)[0] != 1:
    sys.exit(f'tokenize_bench: {prefix}.idx is not an MMIDIDX version 1 index')
code, (count, _) = idx[17], struct.unpack_from('<QQ', idx, 18)
typecode = {8: 'H', 4: 'i'}[code]
sizes = array.array('i', idx[34:34 + 4 * count])
pointers = array.array('q', idx[34 + 4 * count:34 + 12 * count])
tokens = array.array(typecode, open(prefix + '.bin', 'rb').read())
if sys.byteorder != 'little':
    for a in (sizes, pointers, tokens):
        a.byteswap()
ours, starts = array.array(typecode), []
eos = tokens[pointers[0] // tokens.itemsize + sizes[0] - 1]
for d in range(count):
    at = pointers[d] // tokens.itemsize
    if tokens[at + sizes[d] - 1] != eos:
        sys.exit(f'tokenize_bench: document {d} does not end with the eos id {eos}')
    starts.append(len(ours))
    ours.extend(tokens[at:at + sizes[d] - 1])
n = 0
with open(spm_path) as spm:
    for line in spm:
        for word in line.split():
            if n >= len(ours) or ours[n] != int(word):
                d = bisect.bisect_right(starts, n) - 1
                got = ours[n] if n < len(ours) else 'nothing'
                sys.exit(f'tokenize_bench: id {n} (document {d}, its id {n - starts[d]}) is {got} in hdp, {word} in spm_encode')
            n += 1
if n != len(ours):
    sys.exit(f'tokenize_bench: hdp has {len(ours) - n} ids after the last of spm_encode')
print(f'ids equal: {n} of spm_encode, id by id, in {count} documents (each ending with eos {eos})')
EOF

rate() { echo "scale=0; $1 / $2" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc; }
spm_rate=$(rate "$spm_tokens" "$spm_s")
printf '%-52s %8s %12s %14s %10s\n' "run" "seconds" "tokens" "tokens/s" "vs spm"
printf '%-52s %8.2f %12d %14d %10s\n' "spm_encode --output_format=id" "$spm_s" "$spm_tokens" "$spm_rate" "1.00"
for row in "hdp tokenize dir --threads 1|$t1_s|$t1_tokens|$t1_docs" "hdp tokenize dir --threads $threads|$tn_s|$tn_tokens|$tn_docs" \
           "hdp tokenize jsonl --threads $threads|$js_s|$js_tokens|$js_docs" \
           "hdp tokenize dir --threads $threads --whole-documents|$wh_s|$wh_tokens|$wh_docs"; do
  IFS='|' read -r label s tokens docs <<<"$row"
  # Compared on the same ids: hdp's tokens without the eos it adds.
  r=$(rate "$((tokens - docs))" "$s")
  printf '%-52s %8.2f %12d %14d %10s\n' "$label" "$s" "$((tokens - docs))" "$r" "$(ratio "$r" "$spm_rate")"
done
echo "tokens agree id by id: hdp $tn_tokens tokens = $spm_tokens spm_encode ids + $tn_docs eos; byte-identical:" \
  "1 and $threads threads, directory and JSON lines, chunks of lines and whole documents"
echo "work dir: $work"
