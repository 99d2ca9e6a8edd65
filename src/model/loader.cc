#include "model/loader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "core/check.h"
#include "core/dtype.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"

namespace volt::model {

namespace {

using Shape = std::vector<int64_t>;
using SizeFn = int64_t (*)(const GptOssConfig&);

int64_t hidden(const GptOssConfig& c) { return c.hidden_size; }
int64_t q_dim(const GptOssConfig& c) { return c.q_dim(); }
int64_t kv_dim(const GptOssConfig& c) { return c.kv_dim(); }
int64_t heads(const GptOssConfig& c) { return c.num_attention_heads; }
int64_t experts(const GptOssConfig& c) { return c.num_local_experts; }
int64_t inter(const GptOssConfig& c) { return c.intermediate_size; }
int64_t two_inter(const GptOssConfig& c) { return 2 * c.intermediate_size; }

// ---- The one table of checkpoint names -> ModelWeights fields (spec §2.1). Per layer i the names are
// "model.layers.{i}." + name; shapes come from the config.
struct VectorRow {  // [len] bf16
    const char* name;
    ops::VectorWeight LayerWeights::*field;
    SizeFn len;
};
constexpr VectorRow kLayerVectors[] = {
    {"input_layernorm.weight", &LayerWeights::input_layernorm, hidden},
    {"self_attn.sinks", &LayerWeights::sinks, heads},
    {"post_attention_layernorm.weight", &LayerWeights::post_attention_layernorm, hidden},
};
enum class BiasRule { kRequired, kIfAttentionBias };
struct DenseRow {  // name.weight [out, in] bf16, name.bias [out] bf16
    const char* name;
    ops::DenseWeight LayerWeights::*field;
    SizeFn out, in;
    BiasRule bias;
};
constexpr DenseRow kLayerDense[] = {
    {"self_attn.q_proj", &LayerWeights::q_proj, q_dim, hidden, BiasRule::kIfAttentionBias},
    {"self_attn.k_proj", &LayerWeights::k_proj, kv_dim, hidden, BiasRule::kIfAttentionBias},
    {"self_attn.v_proj", &LayerWeights::v_proj, kv_dim, hidden, BiasRule::kIfAttentionBias},
    {"self_attn.o_proj", &LayerWeights::o_proj, hidden, q_dim, BiasRule::kIfAttentionBias},
    {"mlp.router", &LayerWeights::router, experts, hidden, BiasRule::kRequired},
};
// MXFP4 layout: name_blocks [E, out, in/32, 16] u8, name_scales [E, out, in/32] u8.
// bf16 layout (save_pretrained): name [E, in, out]. Both: name_bias [E, out] bf16.
struct ExpertRow {
    const char* name;
    ops::ExpertWeights LayerWeights::*field;
    SizeFn out, in;
};
constexpr ExpertRow kLayerExperts[] = {
    {"mlp.experts.gate_up_proj", &LayerWeights::gate_up, two_inter, hidden},
    {"mlp.experts.down_proj", &LayerWeights::down, hidden, inter},
};
constexpr const char* kEmbedTokens = "model.embed_tokens.weight";  // [V, H]
constexpr const char* kFinalNorm = "model.norm.weight";            // [H]
constexpr const char* kLmHeadModule = "lm_head";                   // lm_head.weight [V, H]
constexpr int64_t kMxfp4Block = 32;                                // values per E8M0 scale (spec §2.3)
// Where the page-touch sums go, so the compiler cannot drop the reads.
std::atomic<uint64_t> touch_sink{0};
constexpr int64_t kTouchPieceBytes = int64_t{16} << 20;

// Keeps the mapped files alive for the pointers into them.
struct CheckpointStorage : WeightStorage {
    std::unique_ptr<io::SafetensorsCheckpoint> checkpoint;
};
// Tensors converted or transposed at load.
struct OwnedStorage : WeightStorage {
    std::vector<std::unique_ptr<uint16_t[]>> buffers;
};

enum class JobKind {
    kMap,        // point into the mapping
    kToBf16,     // convert (or copy, when misaligned) into an owned bf16 buffer
    kTranspose,  // [batch, rows, cols] -> [batch, cols, rows] bf16 into an owned buffer
    kCopy,       // raw bytes into an owned buffer (a tensor misaligned for its element type)
};
struct Job {
    JobKind kind;
    const io::TensorInfo* tensor;
    const io::SafetensorsFile* file;
    const void** dest16 = nullptr;  // bf16 data; exactly one of dest16 / dest8 is set
    const uint8_t** dest8 = nullptr;
    const uint16_t** dest_f16 = nullptr;  // raw F16 (scales of integer weights)
    int64_t batch = 0, rows = 0, cols = 0;
};

// out[k] = bf16(src element `first + k`) for k < n; src holds BF16, F16 or F32 (checked at planning).
void to_bf16(DType t, const uint8_t* src, int64_t first, int64_t n, uint16_t* out) {
    switch (t) {
        case DType::kBF16:
            std::memcpy(out, src + 2 * first, static_cast<size_t>(n) * 2);
            return;
        case DType::kF16:
            for (int64_t k = 0; k < n; ++k) {
                uint16_t h;
                std::memcpy(&h, src + 2 * (first + k), 2);
                out[k] = f32_to_bf16(f16_to_f32(h));
            }
            return;
        case DType::kF32:
            for (int64_t k = 0; k < n; ++k) {
                float f;
                std::memcpy(&f, src + 4 * (first + k), 4);
                out[k] = f32_to_bf16(f);
            }
            return;
        default:
            VOLT_CHECK(false) << "to_bf16: dtype " << dtype_name(t) << " was not rejected at planning";
    }
}

bool convertible_to_bf16(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

// Looks tensors up, checks shape and dtype, and records what to do with each; reads no data.
class Planner {
  public:
    explicit Planner(const io::SafetensorsCheckpoint& ck) : ck_(ck) {}

    bool has(const std::string& name) const { return ck_.find(name) != nullptr; }
    const std::string& checkpoint_path() const { return ck_.path(); }

    // A bf16 result at *dest; F32/F16 are planned as conversions.
    Status bf16(const std::string& name, const Shape& shape, const void** dest) {
        const io::SafetensorsFile* file = nullptr;
        VOLT_ASSIGN_OR_RETURN(const io::TensorInfo* t, lookup(name, shape, &file));
        if (!convertible_to_bf16(t->dtype)) return wrong_dtype(*file, *t, "BF16 (F32 and F16 are converted)");
        const bool aligned = reinterpret_cast<uintptr_t>(t->data) % alignof(uint16_t) == 0;
        Job job{t->dtype == DType::kBF16 && aligned ? JobKind::kMap : JobKind::kToBf16, t, file};
        job.dest16 = dest;
        jobs_.push_back(job);
        return Status::ok();
    }

    // Raw u8 bytes at *dest (MXFP4 blocks and scales).
    Status u8(const std::string& name, const Shape& shape, const uint8_t** dest) {
        const io::SafetensorsFile* file = nullptr;
        VOLT_ASSIGN_OR_RETURN(const io::TensorInfo* t, lookup(name, shape, &file));
        if (t->dtype != DType::kU8) return wrong_dtype(*file, *t, "U8");
        Job job{JobKind::kMap, t, file};
        job.dest8 = dest;
        jobs_.push_back(job);
        return Status::ok();
    }

    // Raw elements of `dtype` at *dest (integer weights, f16 scales): mapped when aligned, else copied.
    Status raw(const std::string& name, const Shape& shape, DType dtype, const void** dest,
               const uint16_t** dest_f16 = nullptr) {
        const io::SafetensorsFile* file = nullptr;
        VOLT_ASSIGN_OR_RETURN(const io::TensorInfo* t, lookup(name, shape, &file));
        if (t->dtype != dtype) return wrong_dtype(*file, *t, std::string(dtype_name(dtype)));
        const bool aligned = reinterpret_cast<uintptr_t>(t->data) % dtype_size(dtype) == 0;
        Job job{aligned ? JobKind::kMap : JobKind::kCopy, t, file};
        job.dest16 = dest;
        job.dest_f16 = dest_f16;
        jobs_.push_back(job);
        return Status::ok();
    }

    // A [b, r, c] tensor stored transposed as [b, c, r] bf16 at *dest.
    Status bf16_transposed(const std::string& name, const Shape& shape, const void** dest) {
        VOLT_CHECK_EQ(shape.size(), 3u);
        const io::SafetensorsFile* file = nullptr;
        VOLT_ASSIGN_OR_RETURN(const io::TensorInfo* t, lookup(name, shape, &file));
        if (!convertible_to_bf16(t->dtype)) return wrong_dtype(*file, *t, "BF16 (F32 and F16 are converted)");
        Job job{JobKind::kTranspose, t, file};
        job.dest16 = dest;
        job.batch = shape[0];
        job.rows = shape[1];
        job.cols = shape[2];
        jobs_.push_back(job);
        return Status::ok();
    }

    std::vector<Job>& jobs() { return jobs_; }
    const std::unordered_set<std::string>& used() const { return used_; }

  private:
    Result<const io::TensorInfo*> lookup(const std::string& name, const Shape& shape,
                                         const io::SafetensorsFile** file) {
        const io::TensorInfo* t = ck_.find(name, file);
        if (t == nullptr) {
            std::string files;
            for (size_t i = 0; i < ck_.files().size() && i < 3; ++i)
                files += (i ? ", " : "") + std::filesystem::path(ck_.files()[i]->path()).filename().string();
            if (ck_.files().size() > 3) files += ", ...";
            return not_found("tensor " + name + " missing from checkpoint " + ck_.path() +
                             " (files: " + files + ")");
        }
        if (t->shape != shape)
            return invalid_argument((*file)->path() + ": tensor " + name + " has shape " + t->shape_string() +
                                    ", expected " + io::shape_to_string(shape) + " (from config.json)");
        used_.insert(name);
        return t;
    }

    static Status wrong_dtype(const io::SafetensorsFile& file, const io::TensorInfo& t,
                              const std::string& expected) {
        return invalid_argument(file.path() + ": tensor " + t.name + " has dtype " +
                                std::string(dtype_name(t.dtype)) + ", expected " + expected);
    }

    const io::SafetensorsCheckpoint& ck_;
    std::vector<Job> jobs_;
    std::unordered_set<std::string> used_;
};

// The weight of a dense projection `module` ("model.layers.3.self_attn.q_proj", "lm_head"; d.out and
// d.in set) in the checkpoint's format (docs/quantization.md): bf16 `module.weight` [out, in]; INT8
// `module.weight` I8 [out, in] + `module.weight_scale` F16 [out]; AWQ (AutoAWQ gemm) `module.qweight` I32
// [in, out/8], `module.qzeros` I32 [in/g, out/8], `module.scales` F16 [in/g, out].
Status plan_dense_weight(Planner& p, const GptOssConfig& c, const std::string& module, ops::DenseWeight* d) {
    if (!dense_quantized(c, module)) return p.bf16(module + ".weight", {d->out, d->in}, &d->w);
    if (c.quant_method == QuantMethod::kInt8) {
        d->format = ops::Format::kInt8;
        VOLT_RETURN_IF_ERROR(p.raw(module + ".weight", {d->out, d->in}, DType::kI8, &d->w));
        VOLT_RETURN_IF_ERROR(p.raw(module + ".weight_scale", {d->out}, DType::kF16, nullptr, &d->scales));
    } else {
        const int64_t g = c.awq_group_size;
        if (d->out % 8 != 0 || d->in % g != 0)
            return invalid_argument(module + ": AWQ needs out (" + std::to_string(d->out) +
                                    ") a multiple of 8 and in (" + std::to_string(d->in) +
                                    ") a multiple of group_size " + std::to_string(g) + " (config.json)");
        d->format = ops::Format::kInt4;
        d->group_size = g;
        VOLT_RETURN_IF_ERROR(p.raw(module + ".qweight", {d->in, d->out / 8}, DType::kI32, &d->w));
        VOLT_RETURN_IF_ERROR(p.raw(module + ".qzeros", {d->in / g, d->out / 8}, DType::kI32, &d->zeros));
        VOLT_RETURN_IF_ERROR(
            p.raw(module + ".scales", {d->in / g, d->out}, DType::kF16, nullptr, &d->scales));
    }
    return Status::ok();
}

Status plan_layer(Planner& p, const GptOssConfig& c, int64_t i, LayerWeights& layer) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    for (const VectorRow& row : kLayerVectors) {
        ops::VectorWeight& v = layer.*row.field;
        v.n = row.len(c);
        VOLT_RETURN_IF_ERROR(p.bf16(prefix + row.name, {v.n}, &v.data));
    }
    for (const DenseRow& row : kLayerDense) {
        ops::DenseWeight& d = layer.*row.field;
        d.out = row.out(c);
        d.in = row.in(c);
        const std::string name = prefix + row.name;
        VOLT_RETURN_IF_ERROR(plan_dense_weight(p, c, name, &d));
        // Without attention_bias a checkpoint may still carry the biases; they are used when present.
        if (row.bias == BiasRule::kRequired || c.attention_bias || p.has(name + ".bias")) {
            d.b.n = d.out;
            VOLT_RETURN_IF_ERROR(p.bf16(name + ".bias", {d.out}, &d.b.data));
        }
    }
    const int64_t e = c.num_local_experts;
    for (const ExpertRow& row : kLayerExperts) {
        ops::ExpertWeights& x = layer.*row.field;
        x.num_experts = e;
        x.out = row.out(c);
        x.in = row.in(c);
        const std::string name = prefix + row.name;
        for (const char* tail : {".qweight", "_qweight", ".weight_scale"})
            if (p.has(name + tail))
                return invalid_argument("tensor " + name + tail + " in checkpoint " + p.checkpoint_path() +
                                        ": integer-quantized (AWQ / INT8) experts are not supported: AutoAWQ "
                                        "cannot quantize gpt-oss experts; keep them MXFP4");
        if (!p.has(name + "_blocks") && !p.has(name))
            return not_found("tensor " + name + "_blocks (MXFP4 layout) or " + name +
                             " (bf16 layout) missing from checkpoint " + p.checkpoint_path());
        if (p.has(name + "_blocks")) {
            x.format = ops::Format::kMxfp4;
            if (x.in % kMxfp4Block != 0)
                return invalid_argument("tensor " + name +
                                        "_blocks: the MXFP4 layout needs an input size that is a "
                                        "multiple of 32, config.json gives " +
                                        std::to_string(x.in));
            const int64_t groups = x.in / kMxfp4Block;
            VOLT_RETURN_IF_ERROR(p.u8(name + "_blocks", {e, x.out, groups, kMxfp4Block / 2}, &x.blocks));
            VOLT_RETURN_IF_ERROR(p.u8(name + "_scales", {e, x.out, groups}, &x.scales));
        } else {
            x.format = ops::Format::kBf16;
            VOLT_RETURN_IF_ERROR(p.bf16_transposed(name, {e, x.in, x.out}, &x.w));
        }
        x.bias.n = e * x.out;
        VOLT_RETURN_IF_ERROR(p.bf16(name + "_bias", {e, x.out}, &x.bias.data));
    }
    return Status::ok();
}

// A piece of a mapped tensor to fault in.
struct TouchPiece {
    const io::SafetensorsFile* file;
    const io::TensorInfo* tensor;
    int64_t begin, end;  // byte range within the tensor
};

// Reads one byte per 4 KiB page of every piece (after madvise WILLNEED) so the kernel maps it in.
// Pieces go to the pool's threads in contiguous runs, which keeps several sequential reads in flight:
// on the dev VM (2 threads, cold page cache) 2.1 GiB/s against 1.2 GiB/s with one thread and
// 1.8 GiB/s for `cat`.
void touch_pieces(const std::vector<TouchPiece>& pieces, ThreadPool& pool, io::ProgressMeter& meter) {
    constexpr int64_t kPage = 4096;
    pool.parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e) {
        uint64_t sum = 0;
        for (int64_t i = b; i < e; ++i) {
            const TouchPiece& piece = pieces[i];
            piece.file->prefetch(piece.tensor->file_offset + piece.begin, piece.end - piece.begin);
            for (int64_t k = piece.begin; k < piece.end; k += kPage) sum += piece.tensor->data[k];
            meter.add(piece.end - piece.begin);
        }
        touch_sink.fetch_add(sum, std::memory_order_relaxed);
    });
}

// Sets the job's pointer; conversions and transposes run here, mapped tensors are only listed in
// `touch` (when not null) to be faulted in afterwards.
void run_job(const Job& job, OwnedStorage& owned, ThreadPool& pool, io::ProgressMeter& meter,
             std::vector<TouchPiece>* touch) {
    const io::TensorInfo& t = *job.tensor;
    switch (job.kind) {
        case JobKind::kMap:
            if (job.dest16 != nullptr) *job.dest16 = t.data;
            if (job.dest8 != nullptr) *job.dest8 = t.data;
            if (job.dest_f16 != nullptr) *job.dest_f16 = reinterpret_cast<const uint16_t*>(t.data);
            if (touch == nullptr) {
                meter.add(t.nbytes);
                return;
            }
            for (int64_t b = 0; b < t.nbytes; b += kTouchPieceBytes)
                touch->push_back({job.file, &t, b, std::min(t.nbytes, b + kTouchPieceBytes)});
            return;
        case JobKind::kToBf16: {
            const int64_t n = t.numel();
            owned.buffers.emplace_back(new uint16_t[std::max<int64_t>(n, 1)]);
            uint16_t* out = owned.buffers.back().get();
            pool.parallel_for(n, 1 << 16,
                              [&](int64_t b, int64_t e) { to_bf16(t.dtype, t.data, b, e - b, out + b); });
            *job.dest16 = out;
            meter.add(t.nbytes);
            return;
        }
        case JobKind::kCopy: {
            owned.buffers.emplace_back(new uint16_t[std::max<int64_t>((t.nbytes + 1) / 2, 1)]);
            std::memcpy(owned.buffers.back().get(), t.data, static_cast<size_t>(t.nbytes));
            if (job.dest16 != nullptr) *job.dest16 = owned.buffers.back().get();
            if (job.dest_f16 != nullptr) *job.dest_f16 = owned.buffers.back().get();
            meter.add(t.nbytes);
            return;
        }
        case JobKind::kTranspose: {
            const int64_t rows = job.rows, cols = job.cols;
            owned.buffers.emplace_back(new uint16_t[std::max<int64_t>(job.batch * rows * cols, 1)]);
            uint16_t* out = owned.buffers.back().get();
            // Work items are (batch, 64-row strip); a strip goes through 64 x 64 tiles converted into a
            // local buffer (sequential reads), then written out column by column, so each output row
            // receives 64 adjacent values and both sides stay in L1.
            constexpr int64_t kTile = 64;
            const int64_t strips = (rows + kTile - 1) / kTile;
            const int64_t strip_bytes = kTile * cols * dtype_size(t.dtype);
            pool.parallel_for(job.batch * strips, 1, [&](int64_t b, int64_t e) {
                uint16_t tile[kTile][kTile];
                for (int64_t item = b; item < e; ++item) {
                    const int64_t bi = item / strips, r0 = (item % strips) * kTile;
                    const int64_t r1 = std::min(rows, r0 + kTile);
                    const int64_t src = bi * rows * cols;
                    uint16_t* dst = out + bi * rows * cols;
                    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
                        const int64_t c1 = std::min(cols, c0 + kTile);
                        for (int64_t r = r0; r < r1; ++r)
                            to_bf16(t.dtype, t.data, src + r * cols + c0, c1 - c0, tile[r - r0]);
                        for (int64_t c = c0; c < c1; ++c)
                            for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = tile[r - r0][c - c0];
                    }
                    meter.add(r1 - r0 == kTile ? strip_bytes : (r1 - r0) * cols * dtype_size(t.dtype));
                }
            });
            *job.dest16 = out;
            return;
        }
    }
}

}  // namespace

Result<std::shared_ptr<ModelWeights>> load_model(const std::string& dir, const LoadOptions& options) {
    VOLT_ASSIGN_OR_RETURN(GptOssConfig config,
                          load_config_file((std::filesystem::path(dir) / "config.json").string()));
    VOLT_ASSIGN_OR_RETURN(std::unique_ptr<io::SafetensorsCheckpoint> ck,
                          io::SafetensorsCheckpoint::open(dir));

    auto w = std::make_shared<ModelWeights>();
    w->config = config;
    w->layers.resize(static_cast<size_t>(config.num_hidden_layers));
    Planner p(*ck);
    const int64_t v = config.vocab_size, h = config.hidden_size;
    w->embed_tokens.out = v;
    w->embed_tokens.in = h;
    VOLT_RETURN_IF_ERROR(p.bf16(kEmbedTokens, {v, h}, &w->embed_tokens.w));
    for (int64_t i = 0; i < config.num_hidden_layers; ++i)
        VOLT_RETURN_IF_ERROR(plan_layer(p, config, i, w->layers[i]));
    w->norm.n = h;
    VOLT_RETURN_IF_ERROR(p.bf16(kFinalNorm, {h}, &w->norm.data));
    w->lm_head.out = v;
    w->lm_head.in = h;
    VOLT_RETURN_IF_ERROR(plan_dense_weight(p, config, kLmHeadModule, &w->lm_head));

    int64_t total = 0, converted = 0, transposed = 0;
    for (const Job& job : p.jobs()) {
        total += job.tensor->nbytes;
        converted += job.kind == JobKind::kToBf16 && job.tensor->dtype != DType::kBF16;
        transposed += job.kind == JobKind::kTranspose;
    }
    if (converted > 0)
        spdlog::info("{}: converting {} non-expert tensors from F32/F16 to BF16 at load", dir, converted);
    if (transposed > 0)
        spdlog::info("{}: bf16 expert layout, transposing {} tensors to [E, out, in]", dir, transposed);
    int64_t ignored = 0;
    for (const std::string& name : ck->tensor_names()) {
        if (p.used().count(name) == 0) {
            spdlog::debug("{}: ignoring tensor {} (not part of the model)", dir, name);
            ++ignored;
        }
    }

    // File order makes the page touching one sequential pass per shard.
    std::stable_sort(p.jobs().begin(), p.jobs().end(), [](const Job& a, const Job& b) {
        if (a.file != b.file) return a.file->path() < b.file->path();
        return a.tensor->file_offset < b.tensor->file_offset;
    });
    auto owned = std::make_shared<OwnedStorage>();
    ThreadPool pool(options.num_threads);
    {
        io::ProgressMeter meter("loading " + dir, total, options.progress);
        std::vector<TouchPiece> touch;
        for (const Job& job : p.jobs())
            run_job(job, *owned, pool, meter, options.touch_pages ? &touch : nullptr);
        touch_pieces(touch, pool, meter);
        meter.finish();
        spdlog::info("{}: loaded {} tensors ({} ignored), {} in {:.1f} s", dir, p.jobs().size(), ignored,
                     io::format_bytes(static_cast<double>(total)), meter.elapsed_s());
    }
    auto mapped = std::make_shared<CheckpointStorage>();
    mapped->checkpoint = std::move(ck);
    w->storage.push_back(std::move(mapped));
    w->storage.push_back(std::move(owned));
    return w;
}

}  // namespace volt::model
