// Flag spelling and token counts: `32k` = 32,000 and `32K` = 32,768 (vLLM's human_readable_int rule).
#include "server/serve_options.h"

#include <gtest/gtest.h>

namespace volt::server {

TEST(ServeOptions, UnderscoresBecomeDashesInFlagNamesOnly) {
    std::vector<std::string> in = {"voltllm",    "serve",       "--max_model_len=32k", "--max_num_seqs",
                                   "some_value", "-x_y",        "--served_model_name", "my_model",
                                   "--",         "--not_a_flag"};
    std::vector<std::string> want = {"voltllm",    "serve",       "--max-model-len=32k", "--max-num-seqs",
                                     "some_value", "-x_y",        "--served-model-name", "my_model",
                                     "--",         "--not_a_flag"};
    EXPECT_EQ(normalize_flag_spelling(in), want);
    // Underscores in the value after '=' stay.
    EXPECT_EQ(normalize_flag_spelling({"--served_model_name=a_b"})[0], "--served-model-name=a_b");
}

TEST(ServeOptions, TokenCounts) {
    EXPECT_EQ(*parse_token_count("4096", "--max-model-len"), 4096);
    EXPECT_EQ(*parse_token_count("32k", "--max-model-len"), 32000);
    EXPECT_EQ(*parse_token_count("32K", "--max-model-len"), 32768);
    EXPECT_EQ(*parse_token_count("1m", "--max-model-len"), 1000000);
    EXPECT_EQ(*parse_token_count("1M", "--max-model-len"), 1048576);
    EXPECT_EQ(*parse_token_count("auto", "--max-model-len"), 0);
    EXPECT_EQ(*parse_token_count("AUTO", "--max-model-len"), 0);
    for (const char* bad : {"", "k", "-5", "1.5k", "12x", "99999999999999999999", "9999999999999999G"}) {
        auto r = parse_token_count(bad, "--max-model-len");
        ASSERT_FALSE(r.is_ok()) << bad;
        EXPECT_NE(r.status().message().find("--max-model-len"), std::string::npos);
    }
}

}  // namespace volt::server
