// Tests of the vLLM flag table and pre-pass (src/server/vllm_flags.h): the article's command lines and vLLM's
// gpt-oss recipe start (verbatim, at the flag layer), unknown flags suggest the nearest, vLLM's
// human-readable integers (values from vLLM's human_readable_int docstring: 1k=1000, 1K=1024, 25.6k=25600),
// served model names, and docs/flags.md holding exactly the table's rows.
#include "server/vllm_flags.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace volt::server {
namespace {

std::vector<std::string> split(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

TEST(VllmFlags, NormalizesSpelling) {
    EXPECT_EQ(normalize_flag_name("--max_model_len"), "--max-model-len");
    EXPECT_EQ(normalize_flag_name("--max_model_len=4_096"), "--max-model-len=4_096");
    EXPECT_EQ(normalize_flag_name("-tp"), "-tp");
    EXPECT_EQ(normalize_flag_name("gpt_oss"), "gpt_oss");
}

TEST(VllmFlags, TableIsSortedUniqueAndComplete) {
    std::set<std::string_view> names, aliases;
    std::string_view prev;
    for (const VllmFlag& f : vllm_flag_table()) {
        EXPECT_LT(prev, f.name);
        prev = f.name;
        EXPECT_TRUE(names.insert(f.name).second) << f.name;
        if (!f.alias.empty()) {
            EXPECT_TRUE(aliases.insert(f.alias).second) << f.alias;
        }
        EXPECT_FALSE(f.text.empty()) << f.name;
        EXPECT_EQ(f.text.find('|'), std::string_view::npos) << f.name;  // would break the docs table
        if (f.negatable) {
            EXPECT_EQ(f.arity, FlagArity::kSwitch) << f.name;
        }
    }
    // The flags the brief and anchors §2 name must all be rows.
    for (const char* n : {"--tensor-parallel-size",
                          "--pipeline-parallel-size",
                          "--gpu-memory-utilization",
                          "--max-model-len",
                          "--enforce-eager",
                          "--disable-custom-all-reduce",
                          "--dtype",
                          "--quantization",
                          "--block-size",
                          "--swap-space",
                          "--port",
                          "--host",
                          "--uds",
                          "--max-num-seqs",
                          "--max-num-batched-tokens",
                          "--disable-log-stats",
                          "--disable-log-requests",
                          "--enable-log-requests",
                          "--served-model-name",
                          "--api-key",
                          "--load-format",
                          "--tool-call-parser",
                          "--enable-auto-tool-choice",
                          "--reasoning-parser",
                          "--tool-server",
                          "--trust-remote-code",
                          "--seed",
                          "--kv-cache-dtype",
                          "--async-scheduling",
                          "--enable-prefix-caching",
                          "--chat-template",
                          "--generation-config",
                          "--pipeline-parallel-rank",
                          "--num-kv-blocks-override",
                          "--num-gpu-blocks-override",
                          "--model"}) {
        EXPECT_NE(find_vllm_flag(n), nullptr) << n;
    }
    // serve takes one --api-key (the server's option is a single string).
    EXPECT_EQ(find_vllm_flag("--api-key")->arity, FlagArity::kValue);
    EXPECT_EQ(find_vllm_flag("-tp"), find_vllm_flag("--tensor-parallel-size"));
    EXPECT_EQ(find_vllm_flag("-pp"), find_vllm_flag("--pipeline-parallel-size"));
}

TEST(VllmFlags, DocsHoldExactlyTheTableRows) {
    std::ifstream in(VOLT_SOURCE_DIR "/docs/flags.md");
    ASSERT_TRUE(in) << "docs/flags.md missing";
    // The rows of the section "## The table" (other tables on the page quote command lines).
    std::set<std::string> doc_rows;
    bool in_table = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("## ", 0) == 0) in_table = line == "## The table";
        if (in_table && line.rfind("| `-", 0) == 0) doc_rows.insert(line);
    }
    std::set<std::string> table_rows;
    for (const VllmFlag& f : vllm_flag_table()) table_rows.insert(flag_markdown_row(f));
    for (const std::string& row : table_rows)
        EXPECT_TRUE(doc_rows.count(row)) << "missing in docs/flags.md:\n" << row;
    for (const std::string& row : doc_rows)
        EXPECT_TRUE(table_rows.count(row)) << "stale in docs/flags.md:\n" << row;
}

TEST(VllmFlags, MarkdownRowFormat) {
    EXPECT_EQ(
        flag_markdown_row(*find_vllm_flag("--tensor-parallel-size")),
        "| `--tensor-parallel-size` | `-tp` | honoured | value | vLLM | ranks each layer is split over (must "
        "divide the KV heads; docs/parallel.md): threads of this process, or one process each (--nnodes, "
        "torchrun's WORLD_SIZE); with --device cuda one GPU per rank (NCCL, in one process or one process "
        "per "
        "GPU), or all on GPU 0 with --tp-same-device |");
}

TEST(VllmFlags, UnknownFlagSuggestsNearest) {
    EXPECT_EQ(suggest_nearest("--max-modle-len"), "--max-model-len");
    EXPECT_EQ(suggest_nearest("--max_num_seq"), "--max-num-seqs");
    EXPECT_EQ(suggest_nearest("--tensor-paralel-size=2"), "--tensor-parallel-size");
    EXPECT_EQ(suggest_nearest("--frobnicate-everything"), "");

    auto r = parse_vllm_command_line({"--model", "m", "--max-modle-len", "4096"});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), "unknown flag --max-modle-len; did you mean --max-model-len?");

    auto far = parse_vllm_command_line({"--frobnicate-everything"});
    ASSERT_FALSE(far.is_ok());
    EXPECT_EQ(far.status().message(), "unknown flag --frobnicate-everything");
}

TEST(VllmFlags, RejectedFlagNamesTheReason) {
    auto r = parse_vllm_command_line({"--model", "m", "--uds", "/tmp/volt.sock"});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(),
              "--uds is not supported: the HTTP layer listens on TCP only; use --host 127.0.0.1 --port N");
}

TEST(VllmFlags, ValueShapes) {
    auto r =
        parse_vllm_command_line(split("serve_model --max_model_len=32k --no-enable-log-requests "
                                      "--served-model-name a b --max-model-len -1 -tp 2"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->model, "serve_model");
    EXPECT_EQ(r->honoured_args, split("--max-model-len 32k --no-enable-log-requests --served-model-name a b "
                                      "--max-model-len -1 --tensor-parallel-size 2"));
    ASSERT_NE(r->find("--max-model-len"), nullptr);
    EXPECT_EQ(r->find("--max-model-len")->values, std::vector<std::string>{"-1"});  // the last wins
    EXPECT_TRUE(r->find("--enable-log-requests")->negated);
    EXPECT_EQ(r->find("--served-model-name")->values, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(r->notices.empty());

    EXPECT_EQ(parse_vllm_command_line({"--port"}).status().message(), "--port needs a value");
    EXPECT_EQ(parse_vllm_command_line({"--enforce-eager=1"}).status().message(),
              "--enforce-eager takes no value (got '1')");
    EXPECT_EQ(parse_vllm_command_line({"a", "b"}).status().message(),
              "unexpected argument 'b' (the model is already 'a')");
    // --no- only for switches that vLLM makes negatable.
    EXPECT_FALSE(parse_vllm_command_line({"--no-port", "1"}).is_ok());
}

// anchors.md, "The command lines users bring", first line.
TEST(VllmFlags, ArticleCommandLine1) {
    auto r = parse_vllm_command_line(split(
        "--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 --gpu-memory-utilization 0.95 "
        "--max-model-len 4096 --enforce-eager --disable-custom-all-reduce --dtype half --quantization awq "
        "--port 8000"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->model, "./gpt-oss-120b-vllm");
    EXPECT_EQ(r->honoured_args, split("--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 "
                                      "--gpu-memory-utilization 0.95 --max-model-len 4096 --enforce-eager "
                                      "--disable-custom-all-reduce --dtype half --quantization awq "
                                      "--port 8000"));
    EXPECT_TRUE(r->notices.empty()) << r->notices.front();
}

TEST(VllmFlags, ArticleCommandLine2) {
    auto r = parse_vllm_command_line(split(
        "--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 --gpu-memory-utilization 0.90 "
        "--max-model-len 2048 --enforce-eager --disable-custom-all-reduce --block-size 16 --swap-space 4 "
        "--port 8000"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    // --swap-space is honoured: KV swap to host memory (engine/block_manager.h).
    EXPECT_EQ(r->honoured_args,
              split("--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 "
                    "--gpu-memory-utilization 0.90 --max-model-len 2048 --enforce-eager "
                    "--disable-custom-all-reduce --block-size 16 --swap-space 4 --port 8000"));
    EXPECT_TRUE(r->notices.empty());
}

// The article's pipeline split: one process per "stage", a balancer in front. Each process serves the
// whole model as a replica, so both pipeline flags are notices.
TEST(VllmFlags, ArticleCommandLine3PipelineRank) {
    for (const char* rank_port : {"0 --port 8001", "1 --port 8002"}) {
        auto r = parse_vllm_command_line(
            split(std::string("--model ./gpt-oss-120b-vllm --tensor-parallel-size 1 "
                              "--pipeline-parallel-size 2 --pipeline-parallel-rank ") +
                  rank_port));
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_EQ(r->honoured_args[0], "--model");
        EXPECT_EQ(r->honoured_args[2], "--tensor-parallel-size");
        EXPECT_EQ(r->honoured_args[4], "--port");
        EXPECT_EQ(r->honoured_args.size(), 6u);
        ASSERT_EQ(r->notices.size(), 2u);
        EXPECT_EQ(
            r->notices[0],
            "--pipeline-parallel-size 2: ignored with --pipeline-parallel-rank (one replica per process)");
        EXPECT_EQ(r->notices[1].rfind("--pipeline-parallel-rank ", 0), 0u);
    }
    // Without the article's rank flag, --pipeline-parallel-size is honoured.
    auto plain = parse_vllm_command_line(split("--model m -pp 2"));
    ASSERT_TRUE(plain.is_ok());
    EXPECT_EQ(plain->honoured_args, split("--model m --pipeline-parallel-size 2"));
}

TEST(VllmFlags, ArticleCommandLine4LogFlags) {
    auto r = parse_vllm_command_line(
        split("--model ./gpt-oss-120b-vllm --disable-log-stats --disable-log-requests"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->honoured_args, split("--model ./gpt-oss-120b-vllm --disable-log-stats"));
    EXPECT_EQ(r->notices,
              std::vector<std::string>{"--disable-log-requests: removed from vLLM (PR #29402); request "
                                       "logging is already off unless --enable-log-requests"});
}

TEST(VllmFlags, GptOssRecipe) {
    auto r = parse_vllm_command_line(
        split("openai/gpt-oss-120b --tool-call-parser openai --enable-auto-tool-choice "
              "--reasoning-parser openai_gptoss --async-scheduling"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->model, "openai/gpt-oss-120b");
    EXPECT_EQ(r->honoured_args,
              split("--tool-call-parser openai --enable-auto-tool-choice --reasoning-parser "
                    "openai_gptoss --async-scheduling"));
    EXPECT_TRUE(r->notices.empty());
}

// A caller that implements only some honoured flags gets notices for the others, not parser errors.
TEST(VllmFlags, UnwiredHonouredFlagsBecomeNotices) {
    auto r = parse_vllm_command_line(
        split("--model m --seed 7 --port 8000 --tensor-parallel-size 4 --swap-space 4"),
        {"--model", "--port"});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->honoured_args, split("--model m --port 8000"));
    EXPECT_EQ(r->notices,
              (std::vector<std::string>{"--seed 7: not wired in this build yet; ignored",
                                        "--tensor-parallel-size 4: not wired in this build yet; ignored",
                                        "--swap-space 4: not wired in this build yet; ignored"}));
    // Rejected and unknown flags still fail whatever is wired.
    EXPECT_FALSE(parse_vllm_command_line({"--uds", "/s"}, {"--model"}).is_ok());
    EXPECT_FALSE(parse_vllm_command_line({"--bogus"}, {"--model"}).is_ok());
}

TEST(VllmFlags, HumanReadableInts) {
    auto v = [](const char* s, bool allow_auto = true) {
        auto r = parse_human_int(s, "--max-model-len", allow_auto);
        EXPECT_TRUE(r.is_ok()) << s << ": " << r.status().to_string();
        return r.is_ok() ? *r : -2;
    };
    EXPECT_EQ(v("4096"), 4096);
    EXPECT_EQ(v("1k"), 1000);
    EXPECT_EQ(v("1K"), 1024);
    EXPECT_EQ(v("32k"), 32000);
    EXPECT_EQ(v("32K"), 32768);
    EXPECT_EQ(v("25.6k"), 25600);
    EXPECT_EQ(v("4.35k"), 4350);    // exact decimal (Python's float product would give 4349)
    EXPECT_EQ(v("1.0005k"), 1000);  // truncated like int()
    EXPECT_EQ(v("2m"), 2000000);
    EXPECT_EQ(v("1G"), 1073741824);
    EXPECT_EQ(v("1t"), 1000000000000);
    EXPECT_EQ(v("auto"), kAutoValue);
    EXPECT_EQ(v("AUTO"), kAutoValue);
    EXPECT_EQ(v("-1"), kAutoValue);
    for (const char* bad : {"", "k", "1.5K", "1.5", "abc", "-5", "1.k", "12x", "99999999999999999999"}) {
        EXPECT_FALSE(parse_human_int(bad, "--max-model-len", true).is_ok()) << bad;
    }
    EXPECT_FALSE(parse_human_int("auto", "--max-num-seqs", false).is_ok());
    EXPECT_EQ(parse_human_int("1.5K", "--max-model-len", true).status().message(),
              "--max-model-len: '1.5K' has decimals with a binary suffix (use k/m/g for x1000) (expected an "
              "integer, 25.6k / 32k (x1000), 32K (x1024), auto or -1)");
}

TEST(VllmFlags, OpsSettingsFollowTheFlags) {
    auto defaults = ops_settings(*parse_vllm_command_line(split("m")));
    ASSERT_TRUE(defaults.is_ok());
    EXPECT_TRUE(defaults->log_stats);      // the stats line is on by default (vLLM)
    EXPECT_FALSE(defaults->log_requests);  // request logging is off by default (vLLM >= PR #21739)
    EXPECT_EQ(defaults->max_log_len, -1);
    EXPECT_EQ(defaults->revision, "main");

    // The article's log flags: stats off; the removed --disable-log-requests changes nothing.
    auto article =
        ops_settings(*parse_vllm_command_line(split("--model m --disable-log-stats --disable-log-requests")));
    EXPECT_FALSE(article->log_stats);
    EXPECT_FALSE(article->log_requests);

    auto on = ops_settings(
        *parse_vllm_command_line(split("m --enable-log-requests --max-log-len 100 --served-model-name a b "
                                       "--revision v2 --download-dir /d")));
    ASSERT_TRUE(on.is_ok());
    EXPECT_TRUE(on->log_requests);
    EXPECT_EQ(on->max_log_len, 100);
    EXPECT_EQ(on->served_model_names, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(on->revision, "v2");
    EXPECT_EQ(on->download_dir, "/d");
    EXPECT_FALSE(
        ops_settings(*parse_vllm_command_line(split("m --enable-log-requests --no-enable-log-requests")))
            ->log_requests);
    EXPECT_EQ(ops_settings(*parse_vllm_command_line(split("m --max-log-len lots"))).status().code(),
              StatusCode::kInvalidArgument);
}

TEST(ServedModelNames, WatchdogBasenameIsAccepted) {
    // The article's watchdog sends {"model": "gpt-oss-120b"}: the basename of the --model directory.
    ServedModelNames n = served_model_names("./gpt-oss-120b/", {});
    EXPECT_EQ(n.primary(), "./gpt-oss-120b/");
    EXPECT_TRUE(n.accepts("gpt-oss-120b"));
    EXPECT_TRUE(n.accepts("./gpt-oss-120b/"));
    EXPECT_FALSE(n.accepts("gpt-oss-20b"));
    EXPECT_FALSE(n.accepts(""));

    ServedModelNames hf = served_model_names("openai/gpt-oss-20b", {});
    EXPECT_EQ(hf.primary(), "openai/gpt-oss-20b");
    EXPECT_TRUE(hf.accepts("gpt-oss-20b"));

    // --served-model-name replaces every default name, as in vLLM.
    ServedModelNames s = served_model_names("./gpt-oss-120b-vllm", {"gpt-oss-120b", "gpt"});
    EXPECT_EQ(s.primary(), "gpt-oss-120b");
    EXPECT_TRUE(s.accepts("gpt"));
    EXPECT_FALSE(s.accepts("gpt-oss-120b-vllm"));
    EXPECT_FALSE(s.accepts("./gpt-oss-120b-vllm"));

    EXPECT_TRUE(served_model_names("/", {}).aliases.empty());
    EXPECT_TRUE(served_model_names("plain", {}).aliases.empty());
}

}  // namespace
}  // namespace volt::server
