// `voltllm tokenize`: prints the token ids of a text as a JSON array. Special tokens in the text are
// recognised (as Hugging Face `tokenizers` does) unless --no-special makes all of it ordinary text.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace volt::tools {

void register_tokenize(CLI::App& app) {
    struct Options {
        std::string model_dir, tokenizer_file, text, file;
        bool no_special = false;
    };
    auto opt = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
    auto* model = cmd->add_option("--model", opt->model_dir, "Model directory holding tokenizer.json");
    auto* tok = cmd->add_option("--tokenizer", opt->tokenizer_file, "A Hugging Face tokenizer.json");
    model->excludes(tok);
    auto* text = cmd->add_option("--text", opt->text, "The text to tokenize");
    auto* file = cmd->add_option("--file", opt->file, "A file whose bytes are the text");
    text->excludes(file);
    cmd->add_flag("--no-special", opt->no_special,
                  "Treat special-token text like <|start|> as ordinary text");
    cmd->callback([opt, model, tok, text, file] {
        if (model->count() + tok->count() != 1) {
            std::fprintf(stderr, "tokenize: give exactly one of --model or --tokenizer\n");
            std::exit(2);
        }
        if (text->count() + file->count() != 1) {
            std::fprintf(stderr, "tokenize: give exactly one of --text or --file\n");
            std::exit(2);
        }
        std::string path = tok->count() ? opt->tokenizer_file : opt->model_dir + "/tokenizer.json";
        auto tokenizer = tokenizer::Tokenizer::from_file(path);
        if (!tokenizer) {
            std::fprintf(stderr, "tokenize: %s\n", tokenizer.status().to_string().c_str());
            std::exit(1);
        }
        std::string input = opt->text;
        if (file->count()) {
            std::ifstream f(opt->file, std::ios::binary);
            if (!f) {
                std::fprintf(stderr, "tokenize: cannot open %s\n", opt->file.c_str());
                std::exit(1);
            }
            std::stringstream ss;
            ss << f.rdbuf();
            input = ss.str();
        }
        auto mode =
            opt->no_special ? tokenizer::SpecialTokens::kIgnore : tokenizer::SpecialTokens::kRecognise;
        auto ids = (*tokenizer)->encode(input, mode);
        if (!ids) {
            std::fprintf(stderr, "tokenize: %s\n", ids.status().to_string().c_str());
            std::exit(1);
        }
        std::string out = "[";
        for (size_t i = 0; i < ids->size(); ++i) {
            if (i) out += ", ";
            out += std::to_string((*ids)[i]);
        }
        out += "]\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    });
}

}  // namespace volt::tools
