// File: cli/commands.h
//
// One function per `hdp` subcommand; each adds its subcommand, options and callback to the app.
// A callback returns normally on success and throws hdp::Error on failure; main() maps the
// exception to an exit code (cli/exit_codes.h).
#pragma once

#include <CLI/CLI.hpp>

namespace hdp::cli {

void add_version_command(CLI::App& app);
void add_ping_command(CLI::App& app);
void add_agent_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_status_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_dashboard_command(CLI::App& app);
void add_control_commands(CLI::App& app);  // drain, stop, checkpoint, config, cordon, uncordon
void add_export_command(CLI::App& app);
void add_sample_command(CLI::App& app);
// `hdp tokenize` runs the helper binary hdp-tokenize beside `hdp` (cli/tokenize_forward.cc), whose
// only command is add_tokenize_command (cli/tokenize_command.cc, cli/tokenize_main.cc): SentencePiece
// and hdp's protobuf cannot share a process.
void add_tokenize_forwarder(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_codec_commands(CLI::App& app);  // hdp-tokenize encode|decode, for hdp sample --tokenizer

}  // namespace hdp::cli
