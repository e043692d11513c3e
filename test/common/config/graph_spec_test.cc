// The `network:` section of a job YAML (common/config/graph_spec.h): every way a graph can be
// written wrong is an error naming file:line, the layer (or input, or output) and what to
// change, read through config::ParseTrainerYaml as cpu-trainer reads a job; and each of
// configs/graphs/*.yaml, the built-in model_types written out as graphs, is the very graph
// its configs/<model>.yaml expands to.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/config/graph_models.h"
#include "common/config/server_config.h"
#include "common/config/trainer_config.h"

namespace fleetps::config {
namespace {

const std::string kShippedConfigs = FLEETPS_SOURCE_DIR "/configs/";

// A job of 3 sparse slots of 4 floats and 5 dense features; `layers` start at line 11, so
// the valid graph below has its layers on lines 11-14 and its output on line 16.
const std::string kNetHyper = R"(hyper_parameters:
  model_type: network
  sparse_inputs_slots: 4
  sparse_feature_dim: 4
  dense_input_dim: 5
)";
const std::string kNetInputs = R"(network:
  inputs:
    - {name: emb, kind: embedding}
    - {name: dense, kind: dense}
)";
const std::string kNetLayers = R"(    - {name: flat, op: flatten, inputs: [emb]}
    - {name: x, op: concat, inputs: [flat, dense]}
    - {name: h, op: fc, inputs: [x], size: 8, activation: relu}
    - {name: logit, op: fc, inputs: [h], size: 1}
)";
const std::string kNetOutput = "    - {name: ctr, input: logit, loss: sigmoid_cross_entropy, label: click}\n";

std::string NetJob(const std::string& layers, const std::string& output = kNetOutput,
                   const std::string& inputs = kNetInputs, const std::string& hyper = kNetHyper) {
  return hyper + inputs + "  layers:\n" + layers + "  outputs:\n" + output + "runner: {}\n";
}

std::string NetworkError(const std::string& text) {
  auto o = ParseTrainerYaml(text, "job.yaml");
  INFO(text);
  REQUIRE_FALSE(o.ok());
  CHECK(o.status().IsInvalidArgument());
  return o.status().message();
}

TEST_CASE("A network section is the job's model: shapes, layout and the loss from the graph") {
  auto o = ParseTrainerYaml(NetJob(kNetLayers), "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->model.type == ModelType::kNetwork);
  CHECK(o->model.output == OutputKind::kSigmoid);
  const graph::Graph& g = *o->model.graph;
  REQUIRE(g.tensors().size() == 6);
  CHECK(g.tensors()[0].shape == graph::Shape{3, 4});  // emb
  CHECK(g.tensors()[1].shape == graph::Shape{5});     // dense
  CHECK(g.tensors()[3].shape == graph::Shape{17});    // x = 12 + 5
  // Declaration order: h's W [17 x 8] and b [8], then logit's W [8 x 1] and b [1].
  CHECK(g.layers()[2].param_offset == 0);
  CHECK(g.layers()[3].param_offset == 17 * 8 + 8);
  CHECK(g.num_params() == 17 * 8 + 8 + 8 + 1);
  CHECK(o->dense_table.dim == g.num_params());
  CHECK(o->sparse_table.dim == 4);  // no embed_w input: the rows are the embedding only
  CHECK(g.spec().layers[2].where == "job.yaml:13:7");
  // The label may be left out: 'click' is the only one.
  CHECK(
      ParseTrainerYaml(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: sigmoid_cross_entropy}\n"), "job.yaml")
          .ok());
}

TEST_CASE("Network errors: ops, keys and arity name the layer") {
  // An unknown op, with the closest one offered; nothing close: the ops are listed.
  CHECK(NetworkError(NetJob(R"(    - {name: flat, op: flatten, inputs: [emb]}
    - {name: x, op: concat, inputs: [flat, dense]}
    - {name: h, op: fcc, inputs: [x], size: 8}
    - {name: logit, op: fc, inputs: [h], size: 1}
)")) == "job.yaml:13: layer 'h': network.layers[2].op: unknown op 'fcc' (did you mean 'fc'?)");
  CHECK_THAT(NetworkError(NetJob("    - {name: logit, op: transformer, inputs: [dense]}\n")),
             Catch::StartsWith("job.yaml:11: layer 'logit': network.layers[0].op: unknown op 'transformer' (ops: fc, "
                               "concat, flatten, reshape, split, add, multiply,"));
  // A key the op does not read.
  CHECK(NetworkError(NetJob("    - {name: logit, op: fc, inputs: [dense], sise: 1}\n")) ==
        "job.yaml:11:46: layer 'logit': unknown key 'sise' under 'network.layers[0]' (did you mean 'size'?)");
  // No op, no inputs.
  CHECK_THAT(NetworkError(NetJob("    - {name: logit, inputs: [dense], size: 1}\n")),
             Catch::StartsWith("job.yaml:11: layer 'logit': network.layers[0]: missing required key 'op' (one of fc, "
                               "concat, flatten,"));
  CHECK(NetworkError(NetJob("    - {name: logit, op: fc, size: 1}\n")) ==
        "job.yaml:11: layer 'logit': network.layers[0]: missing required key 'inputs' (the tensors op fc reads: "
        "graph inputs or other layers' names)");
  // cross reads x0 and x.
  CHECK(NetworkError(NetJob(R"(    - {name: c, op: cross, inputs: [dense]}
    - {name: logit, op: fc, inputs: [c], size: 1}
)")) == "job.yaml:11:7: layer 'c' (cross): takes 2 inputs, got 1 (its 'inputs' list)");
  // outputs on an op that makes one tensor.
  CHECK(NetworkError(NetJob("    - {name: logit, op: fc, inputs: [dense], size: 1, outputs: [a]}\n")) ==
        "job.yaml:11: layer 'logit': network.layers[0].outputs: op fc makes one tensor, named by the layer's name; "
        "remove 'outputs'");
}

TEST_CASE("Network errors: shapes name the layer, its inputs and their shapes") {
  // concat of [3, 4] and [5].
  CHECK(NetworkError(NetJob(R"(    - {name: x, op: concat, inputs: [emb, dense]}
    - {name: logit, op: fc, inputs: [x], size: 1}
)")) == "job.yaml:11:7: layer 'x' (concat): inputs of different ranks; flatten the [n, k] ones first (op: flatten) "
        "(inputs: emb [3, 4], dense [5])");
  // concat along axis 0 of [3, 4] and [5, 3].
  CHECK(NetworkError(NetJob(R"(    - {name: de, op: dense_embedding, inputs: [dense], dim: 3}
    - {name: fields, op: concat, inputs: [emb, de], axis: 0}
    - {name: logit, op: fc, inputs: [fields], size: 1}
)")) == "job.yaml:12:7: layer 'fields' (concat): the inputs differ in dim 1, not only along axis 0 (inputs: emb "
        "[3, 4], de [5, 3])");
  // add of [8] and [5].
  CHECK(NetworkError(NetJob(R"(    - {name: h, op: fc, inputs: [dense], size: 8}
    - {name: sum, op: add, inputs: [h, dense]}
    - {name: logit, op: fc, inputs: [sum], size: 1}
)")) == "job.yaml:12:7: layer 'sum' (add): the inputs must have one shape (inputs: h [8], dense [5])");
  // fc without its width, with an activation it does not have.
  CHECK(NetworkError(NetJob("    - {name: logit, op: fc, inputs: [dense]}\n")) ==
        "job.yaml:11:7: layer 'logit' (fc): missing key 'size' (the output width) (inputs: dense [5])");
  CHECK_THAT(NetworkError(NetJob("    - {name: logit, op: fc, inputs: [dense], size: 1, activation: rellu}\n")),
             Catch::StartsWith("job.yaml:11:7: layer 'logit' (fc): unknown activation 'rellu' (use none, relu,"));
  // split: sizes that do not add up to the last dim; no 'outputs' to name its pieces.
  CHECK(NetworkError(NetJob(R"(    - {name: s, op: split, inputs: [dense], sizes: [2, 2], outputs: [a, b]}
    - {name: logit, op: add, inputs: [a, b]}
)")) == "job.yaml:11:7: layer 's' (split): 'sizes' add up to 4, the last dim is 5 (inputs: dense [5])");
  CHECK(NetworkError(NetJob(R"(    - {name: s, op: split, inputs: [dense], sizes: [4, 1]}
    - {name: logit, op: fc, inputs: [s], size: 1}
)")) == "job.yaml:11:7: layer 's' (split): makes 2 tensors; list 2 names under 'outputs'");
  // reshape to a shape of another size.
  CHECK(NetworkError(NetJob(R"(    - {name: r, op: reshape, inputs: [emb], shape: [4, 4]}
    - {name: logit, op: fc, inputs: [r], size: 1}
)")) == "job.yaml:11:7: layer 'r' (reshape): 'shape' [4, 4] holds 16 floats, the input 12; they must match "
        "(inputs: emb [3, 4])");
}

TEST_CASE("Network errors: names, cycles and unused layers") {
  // a reads b reads a (declaration order is free, but not a cycle).
  CHECK(NetworkError(NetJob(R"(    - {name: a, op: fc, inputs: [b], size: 4}
    - {name: b, op: fc, inputs: [a], size: 4}
    - {name: logit, op: fc, inputs: [b], size: 1}
)")) == "job.yaml:11:7: layer 'a' (fc): its inputs form a cycle (a reads b, b reads a); a layer cannot depend on "
        "its own result: make one of them read a graph input or another layer");
  // A layer downstream of a cycle: the error names the cycle itself.
  CHECK(NetworkError(NetJob(R"(    - {name: logit, op: fc, inputs: [a], size: 1}
    - {name: a, op: fc, inputs: [b], size: 4}
    - {name: b, op: fc, inputs: [c], size: 4}
    - {name: c, op: fc, inputs: [a], size: 4}
)")) == "job.yaml:12:7: layer 'a' (fc): its inputs form a cycle (a reads b, b reads c, c reads a); a layer cannot "
        "depend on its own result: make one of them read a graph input or another layer");
  CHECK(NetworkError(NetJob(R"(    - {name: h, op: fc, inputs: [h], size: 4}
    - {name: logit, op: fc, inputs: [h], size: 1}
)")) == "job.yaml:11:7: layer 'h' (fc): reads its own output 'h'; read a graph input or another layer's output "
        "instead");
  // A misspelt input, with the closest name offered.
  CHECK(NetworkError(NetJob(R"(    - {name: flat, op: flatten, inputs: [emb]}
    - {name: x, op: concat, inputs: [flatt, dense]}
    - {name: logit, op: fc, inputs: [x], size: 1}
)")) == "job.yaml:12:7: layer 'x' reads 'flatt', which is neither an input nor a layer's output (did you mean "
        "'flat'?)");
  // Two layers of one name; two inputs of one name.
  CHECK(NetworkError(NetJob(R"(    - {name: h, op: fc, inputs: [dense], size: 4}
    - {name: h, op: fc, inputs: [dense], size: 4}
    - {name: logit, op: fc, inputs: [h], size: 1}
)")) == "job.yaml:12:7: layer 'h': the name is taken by layer 'h' at job.yaml:11:7; give each input and layer "
        "output its own name");
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, R"(network:
  inputs:
    - {name: emb, kind: embedding}
    - {name: emb, kind: dense}
)")) == "job.yaml:9:7: input 'emb': the name is taken by input 'emb' at job.yaml:8:7; give each input and layer "
        "output its own name");
  // A layer whose result reaches no output.
  CHECK(NetworkError(NetJob(kNetLayers + "    - {name: spare, op: fc, inputs: [x], size: 4}\n", kNetOutput)) ==
        "job.yaml:15:7: layer 'spare' (fc): feeds no output; remove it or use its result");
  // Names are letters, digits, _ . -.
  CHECK(NetworkError(NetJob("    - {name: my logit, op: fc, inputs: [dense], size: 1}\n")) ==
        "job.yaml:11: network.layers[0].name: 'my logit' is not a name (letters, digits, _ . -; not a digit first)");
  CHECK(NetworkError(NetJob("  []\n")) ==
        "job.yaml:11: network.layers: expected a non-empty list (a graph has at least one input, one layer and one "
        "output)");
}

TEST_CASE("Network errors: outputs, losses and labels") {
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logits, loss: sigmoid_cross_entropy}\n")) ==
        "job.yaml:16:7: output 'ctr' reads 'logits', which is neither an input nor a layer's output (did you mean "
        "'logit'?)");
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: softmax_cross_entropy}\n")) ==
        "job.yaml:16:7: output 'ctr': softmax_cross_entropy needs logits of shape [2], 'logit' is [1] (end the graph "
        "with an fc of size 2)");
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: mse}\n")) ==
        "job.yaml:16: output 'ctr': network.outputs[0].loss: unknown loss 'mse' (use sigmoid_cross_entropy, "
        "softmax_cross_entropy or log_loss)");
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit}\n")) ==
        "job.yaml:16: output 'ctr': network.outputs[0]: missing required key 'loss' (sigmoid_cross_entropy, "
        "softmax_cross_entropy or log_loss)");
  CHECK(
      NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: sigmoid_cross_entropy, label: buy}\n")) ==
      "job.yaml:16:7: output 'ctr': unknown label 'buy'; the data's labels are click (the data section's label_slot / "
      "label_slots: add it there or pick one of those)");
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: sigmoid_cross_entropy, weight: 0}\n")) ==
        "job.yaml:16: output 'ctr': network.outputs[0].weight: expected a weight > 0, got 0");
  CHECK(
      NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: log_loss}\n")) ==
      "job.yaml:16:7: output 'ctr': log_loss needs a probability, and 'logit' is not one; feed it a sigmoid (op "
      "sigmoid, or fc with activation: sigmoid) or a multiply of sigmoids, or use sigmoid_cross_entropy on the logit");
  CHECK(NetworkError(NetJob(kNetLayers, "    - {name: ctr, input: dense, loss: sigmoid_cross_entropy}\n")) ==
        "job.yaml:16:7: output 'ctr': reads the graph input 'dense'; an output reads a layer's result");
}

// `job` with the data's labels click and conversion.
std::string TwoLabels(std::string job) {
  const std::string runner = "runner: {}\n";
  REQUIRE(job.find(runner) != std::string::npos);
  return job.replace(job.find(runner), runner.size(), "runner: {label_slots: [click, conversion]}\n");
}

TEST_CASE("Outputs on the data's labels: each names its column; a built-in model learns one") {
  const std::string layers = kNetLayers + "    - {name: logit2, op: fc, inputs: [h], size: 1}\n";
  auto o = ParseTrainerYaml(
      TwoLabels(NetJob(
          layers, "    - {name: cvr, input: logit2, loss: sigmoid_cross_entropy, label: conversion}\n" + kNetOutput)),
      "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->model.labels == std::vector<std::string>{"click", "conversion"});
  CHECK(o->model.graph->output_label(0) == 1);
  CHECK(o->model.graph->output_label(1) == 0);
  CHECK(NetworkError(TwoLabels(NetJob(kNetLayers, "    - {name: ctr, input: logit, loss: sigmoid_cross_entropy}\n"))) ==
        "job.yaml:16:7: output 'ctr': the data has 2 labels (click, conversion); name the one this output learns with "
        "label: <name>");
  CHECK(
      NetworkError(TwoLabels("hyper_parameters:\n  model_type: ctr_dnn\nrunner: {}\n")) ==
      "job.yaml:2: hyper_parameters.model_type: model_type ctr_dnn learns one label and the data has 2 (label_slots); "
      "keep one, or write the model as a network: section with one output per label (configs/mmoe.yaml)");
}

TEST_CASE("Several outputs: each a loss on a label, log_loss on products of sigmoids") {
  const std::string layers = kNetLayers +
                             "    - {name: p1, op: sigmoid, inputs: [logit]}\n"
                             "    - {name: l2, op: fc, inputs: [h], size: 1, activation: sigmoid}\n"
                             "    - {name: both, op: multiply, inputs: [p1, l2]}\n";
  const std::string outputs = kNetOutput +
                              "    - {name: joint, input: both, loss: log_loss, weight: 0.5}\n"
                              "    - {name: second, input: l2, loss: log_loss, label: click}\n";
  auto o = ParseTrainerYaml(NetJob(layers, outputs), "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  const graph::Graph& g = *o->model.graph;
  REQUIRE(g.num_outputs() == 3);
  CHECK(g.tensors()[g.output_tensor(1)].name == "both");
  CHECK(g.output_label(1) == 0);
  CHECK(g.spec().outputs[1].weight == 0.5);
  CHECK(
      NetworkError(NetJob(kNetLayers + "    - {name: lr, op: relu, inputs: [logit]}\n"
                                       "    - {name: m, op: multiply, inputs: [lr, logit]}\n",
                          kNetOutput + "    - {name: joint, input: m, loss: log_loss}\n")) ==
      "job.yaml:19:7: output 'joint': log_loss needs a probability, and 'm' is not one; feed it a sigmoid (op "
      "sigmoid, or fc with activation: sigmoid) or a multiply of sigmoids, or use sigmoid_cross_entropy on the logit");
}

// The job's 3 slots read as: slot 2 a sequence of 5 with its mask, slots 0-1 pooled.
std::string SequenceJob(const std::string& inputs) {
  return NetJob(R"(    - {name: flat, op: flatten, inputs: [emb]}
    - {name: att, op: target_attention, inputs: [hist, mask, t], hidden: [4]}
    - {name: x, op: concat, inputs: [flat, att]}
    - {name: logit, op: fc, inputs: [x], size: 1}
)",
                kNetOutput, "network:\n  inputs:\n" + inputs);
}

TEST_CASE("Network sequence inputs: the row's layout and their errors") {
  const std::string ok = R"(    - {name: emb, kind: embedding, pooling: mean}
    - {name: t, kind: embedding, slots: [0], pooling: mean}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 2}
)";
  // t is [1, 4]: the attention needs [4], so reshape it first.
  auto o = ParseTrainerYaml(NetJob(R"(    - {name: tv, op: reshape, inputs: [t], shape: [4]}
    - {name: flat, op: flatten, inputs: [emb]}
    - {name: att, op: target_attention, inputs: [hist, mask, tv], hidden: [4]}
    - {name: x, op: concat, inputs: [flat, att]}
    - {name: logit, op: fc, inputs: [x], size: 1}
)",
                                   kNetOutput, "network:\n  inputs:\n" + ok),
                            "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  const auto& g = *o->model.graph;
  CHECK(g.tensors()[0].shape == graph::Shape{2, 4});  // slots 0 and 1; slot 2 is the sequence
  CHECK(g.tensors()[2].shape == graph::Shape{5, 4});
  CHECK(g.tensors()[3].shape == graph::Shape{5});
  CHECK(g.slot_read(0).pooling == graph::Pooling::kMean);
  CHECK(g.slot_read(2).max_len == 5);
  // [slot 0: 4 | slot 1: 4 | slot 2: 5 x 4 + 5 | dense 5]
  CHECK(g.slot_offset(2) == 8);
  CHECK(g.row_width() == 8 + 25 + 5);
  CHECK(DenseInputDim(o->model) == g.row_width());

  CHECK(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2}
    - {name: mask, kind: sequence_mask, slot: 2}
)")) == "job.yaml:10: input 'hist': network.inputs[2]: missing required key 'max_len' (the positions kept, e.g. 50)");
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 7, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 7}
)")),
             Catch::Contains("input 'hist': slot 7 does not exist (the job has 3 sparse slots, 0 to 2)"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 1}
)")),
             Catch::Contains("input 'mask': slot 1 is not a sequence slot (add an input of kind sequence for it)"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding, slots: [0, 2]}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 2}
)")),
             Catch::Contains("input 'emb': slot 2 is a sequence of input 'hist'; a pooled input cannot read it too"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding, pooling: max}
    - {name: t, kind: embedding, slots: [0]}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 2}
)")),
             Catch::Contains("input 't': slot 0 is pooled another way by input 'emb'; the inputs reading one slot must "
                             "agree on `pooling`"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2, max_len: 0}
    - {name: mask, kind: sequence_mask, slot: 2}
)")),
             Catch::Contains("network.inputs[2].max_len: expected a length in [1, 4096]"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding, pooling: avg}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 2}
)")),
             Catch::Contains("unknown pooling 'avg' (use sum, mean, sqrt or max)"));
  CHECK_THAT(NetworkError(SequenceJob(R"(    - {name: emb, kind: embedding, max_len: 3}
    - {name: t, kind: dense}
    - {name: hist, kind: sequence, slot: 2, max_len: 5}
    - {name: mask, kind: sequence_mask, slot: 2}
)")),
             Catch::Contains("unknown key 'max_len'"));
}

TEST_CASE("A built-in model's layer keys beside a network section are an error, not ignored") {
  const std::string hyper = kNetHyper + "  fc_sizes: [64, 32]\n";
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, kNetInputs, hyper)) ==
        "job.yaml:6: hyper_parameters.fc_sizes: is a built-in model's key, and this job's model is its network: "
        "section; remove fc_sizes (the graph's layers and outputs say it)");
  CHECK_THAT(NetworkError(NetJob(kNetLayers, kNetOutput, kNetInputs, kNetHyper + "  output: sigmoid\n")),
             Catch::Contains("hyper_parameters.output: is a built-in model's key"));
}

TEST_CASE("Network errors: inputs and the job's slots") {
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, R"(network:
  inputs:
    - {name: emb, kind: sparse}
    - {name: dense, kind: dense}
)")) == "job.yaml:8: input 'emb': network.inputs[0].kind: unknown kind 'sparse' (use row, embedding, embed_w, dense, "
        "sequence or sequence_mask)");
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, R"(network:
  inputs:
    - {name: emb}
    - {name: dense, kind: dense}
)")) == "job.yaml:8: input 'emb': network.inputs[0]: missing required key 'kind' (row, embedding, embed_w, dense, "
        "sequence or sequence_mask)");
  // dense features the job does not have.
  const std::string no_dense = R"(hyper_parameters:
  model_type: network
  sparse_inputs_slots: 4
  sparse_feature_dim: 4
  dense_input_dim: 0
)";
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, kNetInputs, no_dense)) ==
        "job.yaml:9:7: input 'dense': kind dense needs dense features and the job has none (dense_input_dim: 0)");
}

TEST_CASE("Network errors: the section against hyper_parameters.model_type") {
  const std::string deepfm = R"(hyper_parameters:
  model_type: deepfm
  sparse_inputs_slots: 4
  sparse_feature_dim: 4
  dense_input_dim: 5
)";
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, kNetInputs, deepfm)) ==
        "job.yaml:2: hyper_parameters.model_type: is deepfm but the job also has a 'network:' section; give one "
        "(model_type: network, or drop the section)");
  CHECK(NetworkError(kNetHyper + "runner: {}\n") ==
        "job.yaml:2: model_type network needs a 'network:' section (the layer graph, "
        "docs/MODELS.md)");
  // Without model_type the section alone makes the model.
  std::string unnamed = kNetHyper;
  unnamed.erase(unnamed.find("  model_type: network\n"), std::string("  model_type: network\n").size());
  auto o = ParseTrainerYaml(NetJob(kNetLayers, kNetOutput, kNetInputs, unnamed), "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->model.type == ModelType::kNetwork);
  CHECK(NetworkError(NetJob(kNetLayers, kNetOutput, "network:\n  extra: 1\n" + kNetInputs.substr(9))) ==
        "job.yaml:7:3: unknown key 'extra' under 'network' (known keys: inputs, layers, outputs)");
}

// configs/graphs/<model>.yaml against configs/<model>.yaml: the same tensors, layers (op,
// inputs, keys, parameter shapes and offsets), output, tables and optimizer, so that either
// job trains the same model from the same initial values.
void CheckSameModel(const std::string& model) {
  auto builtin = LoadTrainerYaml(kShippedConfigs + model + ".yaml");
  auto written = LoadTrainerYaml(kShippedConfigs + "graphs/" + model + ".yaml");
  INFO(model << ": " << builtin.status().ToString() << " / " << written.status().ToString());
  REQUIRE(builtin.ok());
  REQUIRE(written.ok());
  CHECK(written->model.type == ModelType::kNetwork);
  const auto a = graph::ModelGraph(builtin->model);
  const auto b = graph::ModelGraph(written->model);
  REQUIRE(a->tensors().size() == b->tensors().size());
  for (size_t t = 0; t < a->tensors().size(); ++t) {
    INFO("tensor " << t << ": " << a->tensors()[t].name);
    CHECK(b->tensors()[t].name == a->tensors()[t].name);
    CHECK(b->tensors()[t].shape == a->tensors()[t].shape);
  }
  REQUIRE(a->spec().inputs.size() == b->spec().inputs.size());
  for (size_t i = 0; i < a->spec().inputs.size(); ++i) CHECK(b->spec().inputs[i].kind == a->spec().inputs[i].kind);
  REQUIRE(a->layers().size() == b->layers().size());
  for (size_t l = 0; l < a->layers().size(); ++l) {
    const graph::ResolvedLayer& x = a->layers()[l];
    const graph::ResolvedLayer& y = b->layers()[l];
    INFO("layer " << x.spec.name << " (" << y.spec.where << ")");
    CHECK(y.spec.name == x.spec.name);
    CHECK(y.spec.op == x.spec.op);
    CHECK(y.inputs == x.inputs);
    CHECK(y.outputs == x.outputs);
    CHECK(y.params == x.params);
    CHECK(y.param_offset == x.param_offset);
    // Every key, as the kernels read it (a number, a word, a list).
    REQUIRE(y.spec.attrs.values().size() == x.spec.attrs.values().size());
    for (const auto& [key, value] : x.spec.attrs.values()) {
      INFO("key " << key);
      REQUIRE(y.spec.attrs.Has(key));
      const graph::AttrValue& other = y.spec.attrs.values().at(key);
      CHECK(other.numbers == value.numbers);
      CHECK(other.text == value.text);
      CHECK(other.is_text == value.is_text);
      CHECK(other.is_list == value.is_list);
    }
  }
  CHECK(a->order().size() == b->order().size());
  CHECK(std::equal(a->order().begin(), a->order().end(), b->order().begin(), b->order().end()));
  REQUIRE(b->spec().outputs.size() == 1);
  CHECK(b->spec().outputs[0].loss == a->spec().outputs[0].loss);
  CHECK(b->output_tensor(0) == a->output_tensor(0));
  CHECK(b->num_params() == a->num_params());
  CHECK(b->reads_embed_w() == a->reads_embed_w());
  CHECK(b->row_width() == a->row_width());
  // What the tables, the data reader and the trainer derive from the model.
  CHECK(written->model.output == builtin->model.output);
  CHECK(written->model.init_seed == builtin->model.init_seed);
  CHECK(written->sparse_table.dim == builtin->sparse_table.dim);
  CHECK(written->dense_table.dim == builtin->dense_table.dim);
  CHECK(written->sparse_table.accessor.kind == builtin->sparse_table.accessor.kind);
  CHECK(written->model.optimizer.kind == builtin->model.optimizer.kind);
  CHECK(written->model.optimizer.learning_rate == builtin->model.optimizer.learning_rate);
  CHECK(written->data.sparse_slots.size() == builtin->data.sparse_slots.size());
  CHECK(written->data.dense_dim == builtin->data.dense_dim);
  const auto normal = [](const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const auto& p : paths) out.push_back(std::filesystem::path(p).lexically_normal().string());
    return out;
  };
  CHECK(normal(written->data.train_paths) == normal(builtin->data.train_paths));
  CHECK(normal(written->data.test_paths) == normal(builtin->data.test_paths));
  CHECK(written->data.batch_size == builtin->data.batch_size);
  CHECK(written->epochs == builtin->epochs);
  // A pserver started on either file serves the same tables.
  auto builtin_server = LoadServerYaml(kShippedConfigs + model + ".yaml");
  auto written_server = LoadServerYaml(kShippedConfigs + "graphs/" + model + ".yaml");
  INFO(builtin_server.status().ToString() << " / " << written_server.status().ToString());
  REQUIRE(builtin_server.ok());
  REQUIRE(written_server.ok());
  REQUIRE(written_server->tables.size() == builtin_server->tables.size());
  for (size_t t = 0; t < builtin_server->tables.size(); ++t) {
    CHECK(written_server->tables[t].id == builtin_server->tables[t].id);
    CHECK(written_server->tables[t].dim == builtin_server->tables[t].dim);
  }
}

TEST_CASE("configs/graphs: each built-in model written as a network is the graph its model_type expands to") {
  for (const std::string model : {"ctr_dnn", "wide_deep", "deepfm", "dcn", "dlrm"}) {
    DYNAMIC_SECTION(model) { CheckSameModel(model); }
  }
}

}  // namespace
}  // namespace fleetps::config
