#include "trainer/graph/executor.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/sharding.h"

namespace fleetps::trainer::graph {

using fleetps::graph::Graph;
using fleetps::graph::InputKind;

std::vector<GraphExecutor::Segment> GraphExecutor::InputSegments(const Graph& g, const fleetps::graph::GraphInput& in) {
  std::vector<Segment> segments;
  const auto add = [&](size_t offset, size_t length) {
    if (!segments.empty() && segments.back().offset + segments.back().length == offset) {
      segments.back().length += length;
    } else {
      segments.push_back(Segment{offset, length});
    }
  };
  const size_t embed_w = g.reads_embed_w() ? 1 : 0;
  switch (in.kind) {
    case InputKind::kRow: add(0, g.row_width()); break;
    case InputKind::kEmbedding:
      for (size_t s : fleetps::graph::InputSlots(in, g.slot_reads()))
        add(g.slot_offset(s) + embed_w, g.row().slot_widths[s]);
      break;
    case InputKind::kEmbedW:
      for (size_t s : fleetps::graph::InputSlots(in, g.slot_reads())) add(g.slot_offset(s), 1);
      break;
    case InputKind::kDense: add(g.row_width() - g.row().dense_dim, g.row().dense_dim); break;
    case InputKind::kSequence: add(g.slot_offset(in.slot), in.max_len * g.row().slot_widths[in.slot]); break;
    case InputKind::kSequenceMask: {
      const size_t len = g.slot_read(in.slot).max_len;
      add(g.slot_offset(in.slot) + len * g.row().slot_widths[in.slot], len);
      break;
    }
  }
  return segments;
}

GraphExecutor::GraphExecutor(std::shared_ptr<const Graph> graph, const dense::CpuGemm* gemm)
    : graph_(std::move(graph)), row_width_(graph_->row_width()) {
  FLEETPS_CHECK(gemm != nullptr);
  const auto tensors = graph_->tensors();
  for (const fleetps::graph::ResolvedLayer& layer : graph_->layers()) {
    std::vector<Shape> in, out;
    for (size_t t : layer.inputs) in.push_back(tensors[t].shape);
    for (size_t t : layer.outputs) out.push_back(tensors[t].shape);
    kernels_.push_back(MakeKernel(KernelContext{layer, in, out, gemm}));
  }
  const auto graph_inputs = graph_->spec().inputs;
  for (const fleetps::graph::GraphInput& in : graph_inputs) segments_.push_back(InputSegments(*graph_, in));
  for (size_t l = 0; l < graph_->layers().size(); ++l) {
    const auto& reads = graph_->layers()[l].inputs;
    for (size_t i = 0; i < reads.size(); ++i) {
      if (reads[i] < graph_inputs.size() && graph_inputs[reads[i]].kind == InputKind::kRow)
        row_reads_.push_back({l, i});
    }
  }
  // A tensor read once, by a kernel that can write its gradient instead of adding to it,
  // needs no zeroing before the backward pass; nor does the row when that holds for its
  // only reader.
  // An output's loss counts as a reader: a tensor that is an output and also read by a
  // layer gets both gradients added.
  std::vector<size_t> readers(tensors.size(), 0);
  for (const auto& layer : graph_->layers()) {
    for (size_t t : layer.inputs) ++readers[t];
  }
  logit_offsets_ = {0};
  for (size_t o = 0; o < graph_->num_outputs(); ++o) {
    ++readers[graph_->output_tensor(o)];
    logit_offsets_.push_back(logit_offsets_.back() + tensors[graph_->output_tensor(o)].size);
  }
  written_.assign(tensors.size(), false);
  for (size_t l = 0; l < graph_->layers().size(); ++l) {
    const auto& reads = graph_->layers()[l].inputs;
    overwrite_.emplace_back(reads.size(), 0);
    for (size_t i = 0; i < reads.size(); ++i) {
      const bool is_row = reads[i] < graph_inputs.size() && graph_inputs[reads[i]].kind == InputKind::kRow;
      const bool only = is_row ? row_reads_.size() == 1 : readers[reads[i]] == 1;
      if (only && kernels_[l]->OverwritesInputGrads()) {
        overwrite_[l][i] = 1;
        written_[reads[i]] = true;
      }
    }
  }
  row_written_ = row_reads_.size() == 1 && overwrite_[row_reads_[0].first][row_reads_[0].second];
  // A tensor needs a gradient when it depends on parameters or on a row that needs one.
  const size_t inputs = graph_->spec().inputs.size();
  for (bool row : {true, false}) {
    std::vector<bool> need(tensors.size(), false);
    for (size_t i = 0; i < inputs; ++i) need[i] = row;
    for (size_t l : graph_->order()) {
      const auto& layer = graph_->layers()[l];
      bool any = layer.num_params > 0;
      for (size_t t : layer.inputs) any = any || need[t];
      for (size_t t : layer.outputs) need[t] = any;
    }
    (row ? grad_with_row_ : grad_without_row_) = std::move(need);
  }
}

void GraphExecutor::InitParams(std::span<float> params, UniformRandom* rng) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  const auto layers = graph_->layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    kernels_[l]->InitParams(params.subspan(layers[l].param_offset, layers[l].num_params), rng);
  }
}

void GraphExecutor::Plan(size_t batch, Workspace* ws) const {
  if (ws->batch == batch) return;
  const auto tensors = graph_->tensors();
  const auto layers = graph_->layers();
  size_t floats = 0;
  for (const auto& t : tensors) floats += 2 * batch * t.size;
  for (size_t l = 0; l < layers.size(); ++l) floats += kernels_[l]->ScratchFloats(batch);
  if (ws->arena.size() < floats) ws->arena.resize(floats);
  float* next = ws->arena.data();
  const auto take = [&](size_t n) {
    std::span<float> s(next, n);
    next += n;
    return s;
  };
  ws->values.resize(tensors.size());
  ws->grads.resize(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    ws->values[t] = take(batch * tensors[t].size);
    ws->grads[t] = take(batch * tensors[t].size);
  }
  ws->scratch.resize(layers.size());
  ws->inputs.resize(layers.size());
  ws->outputs.resize(layers.size());
  ws->output_grads.resize(layers.size());
  ws->input_grads.resize(layers.size());
  ws->input_grads_none.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    ws->scratch[l] = take(kernels_[l]->ScratchFloats(batch));
    ws->inputs[l].assign(layers[l].inputs.size(), {});
    ws->input_grads[l].clear();
    ws->input_grads_none[l].clear();
    for (size_t t : layers[l].inputs) {
      ws->input_grads[l].push_back(grad_with_row_[t] ? ws->grads[t] : std::span<float>());
      ws->input_grads_none[l].push_back(grad_without_row_[t] ? ws->grads[t] : std::span<float>());
    }
    ws->outputs[l].clear();
    ws->output_grads[l].clear();
    for (size_t t : layers[l].outputs) {
      ws->outputs[l].push_back(ws->values[t]);
      ws->output_grads[l].push_back(ws->grads[t]);
    }
  }
  ws->batch = batch;
}

void GraphExecutor::GatherInputs(std::span<const float> row, size_t batch, Workspace* ws) const {
  const auto inputs = graph_->spec().inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].kind == InputKind::kRow) continue;  // read in place (Forward)
    const size_t size = graph_->tensors()[i].size;
    for (size_t b = 0; b < batch; ++b) {
      const float* r = row.data() + b * row_width_;
      float* out = ws->values[i].data() + b * size;
      for (const Segment& seg : segments_[i]) {
        // A loop, not a memmove call: most segments are one slot's few floats.
        for (size_t j = 0; j < seg.length; ++j) out[j] = r[seg.offset + j];
        out += seg.length;
      }
    }
  }
}

void GraphExecutor::ScatterInputGrads(size_t batch, const Workspace& ws, std::span<float> row_grads) const {
  const auto inputs = graph_->spec().inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The row's own gradient is already in row_grads; the masks have none.
    if (inputs[i].kind == InputKind::kRow || inputs[i].kind == InputKind::kSequenceMask) continue;
    const size_t size = graph_->tensors()[i].size;
    for (size_t b = 0; b < batch; ++b) {
      float* r = row_grads.data() + b * row_width_;
      const float* d = ws.grads[i].data() + b * size;
      for (const Segment& seg : segments_[i]) {
        for (size_t j = 0; j < seg.length; ++j) r[seg.offset + j] += d[j];
        d += seg.length;
      }
    }
  }
}

void GraphExecutor::Forward(std::span<const float> params, std::span<const float> row, size_t batch, Workspace* ws,
                            std::span<float> logits, bool training) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  FLEETPS_CHECK_EQ(row.size(), batch * row_width_);
  FLEETPS_CHECK_EQ(logits.size(), batch * num_logits());
  Plan(batch, ws);
  GatherInputs(row, batch, ws);
  const auto layers = graph_->layers();
  const auto graph_inputs = graph_->spec().inputs;
  const auto view = [&](size_t t) -> std::span<const float> {
    return t < graph_inputs.size() && graph_inputs[t].kind == InputKind::kRow ? row : ws->values[t];
  };
  for (size_t l : graph_->order()) {
    const auto& layer = layers[l];
    for (size_t i = 0; i < layer.inputs.size(); ++i) ws->inputs[l][i] = view(layer.inputs[i]);
    kernels_[l]->Forward(OpArgs{.batch = batch,
                                .params = params.subspan(layer.param_offset, layer.num_params),
                                .inputs = ws->inputs[l],
                                .outputs = ws->outputs[l],
                                .scratch = ws->scratch[l],
                                .training = training,
                                .seed = MixKey(MixKey(ws->steps) ^ l)});
  }
  if (training) ++ws->steps;
  for (size_t o = 0; o < graph_->num_outputs(); ++o) {
    const std::span<const float> out = view(graph_->output_tensor(o));
    std::copy(out.begin(), out.end(), logits.begin() + static_cast<std::ptrdiff_t>(batch * logit_offsets_[o]));
  }
}

void GraphExecutor::Backward(std::span<const float> params, std::span<const float> row, size_t batch,
                             std::span<const float> logit_grads, Workspace* ws, std::span<float> param_grads,
                             std::span<float> row_grads, const std::function<void(size_t, size_t)>& ready) const {
  FLEETPS_CHECK_EQ(ws->batch, batch) << "Backward without its Forward";
  FLEETPS_CHECK_EQ(param_grads.size(), num_params());
  FLEETPS_CHECK(row_grads.empty() || row_grads.size() == batch * row_width_);
  (void)row;
  const bool with_row = !row_grads.empty();
  const std::vector<bool>& need = with_row ? grad_with_row_ : grad_without_row_;
  const auto inputs = graph_->spec().inputs;
  for (size_t t = 0; t < need.size(); ++t) {
    const bool row_input = t < inputs.size() && inputs[t].kind == InputKind::kRow;
    if (need[t] && !row_input && !written_[t]) std::fill(ws->grads[t].begin(), ws->grads[t].end(), 0.0f);
  }
  if (with_row) {
    // The row inputs' gradients go straight into row_grads; the other inputs' add to it after.
    if (!row_written_) std::fill(row_grads.begin(), row_grads.end(), 0.0f);
    for (const auto& [l, i] : row_reads_) ws->input_grads[l][i] = row_grads;
  }
  FLEETPS_CHECK_EQ(logit_grads.size(), batch * num_logits());
  for (size_t o = 0; o < graph_->num_outputs(); ++o) {
    const std::span<float> g = ws->grads[graph_->output_tensor(o)];
    const float* from = logit_grads.data() + batch * logit_offsets_[o];
    for (size_t i = 0; i < g.size(); ++i) g[i] += from[i];
  }
  const auto layers = graph_->layers();
  const auto order = graph_->order();
  for (size_t i = order.size(); i-- > 0;) {
    const size_t l = order[i];
    const auto& layer = layers[l];
    if (!need[layer.outputs[0]]) continue;
    const std::span<float> own = param_grads.subspan(layer.param_offset, layer.num_params);
    kernels_[l]->Backward(OpArgs{.batch = batch,
                                 .params = params.subspan(layer.param_offset, layer.num_params),
                                 .inputs = ws->inputs[l],
                                 .outputs = ws->outputs[l],
                                 .scratch = ws->scratch[l]},
                          OpGrads{.output_grads = ws->output_grads[l],
                                  .param_grads = own,
                                  .input_grads = with_row ? ws->input_grads[l] : ws->input_grads_none[l],
                                  .overwrite = overwrite_[l]});
    if (ready && layer.num_params > 0) ready(layer.param_offset, layer.param_offset + layer.num_params);
  }
  if (with_row) ScatterInputGrads(batch, *ws, row_grads);
}

}  // namespace fleetps::trainer::graph
