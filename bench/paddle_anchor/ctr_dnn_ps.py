#!/usr/bin/env python3
"""PaddlePaddle's own CPU parameter server (Fleet, the_one_ps, a_sync) training ctr_dnn as
PaddleRec's rank/dnn defines it: 26 sparse slots of 9-dim embeddings in a distributed sparse
table (sparse_embedding; Paddle's default SparseAccessor with its sparse Adam rule at the
program's learning rate), concatenated with the 13 dense features, FC 512-256-128-32 with
ReLU, a 2-way softmax, cross-entropy, Adam 0.001, batch 512, one reader and one worker thread
per trainer (QueueDataset over MultiSlot files, see to_multislot.py). The model fleetps's
configs/ctr_dnn.yaml trains.

The role comes from Paddle's environment contract (TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST,
PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT), the same variables fleetps
reads. --local trains the same model in this one process instead (a local embedding table,
sparse lazy Adam): the reference that tells the model apart from the parameter server.

A trainer (or --local) writes a JSON report to --report: per epoch its examples, wall and CPU
seconds, and the cumulative AUC of its predictions over the epoch (each batch scored before
its update: progressive validation). Paddle's pservers run until they are killed; run.sh
reads their CPU time from /proc first.
  ctr_dnn_ps.py --train-file FILE --report OUT.json [--epochs N] [--batch 512] [--local]
"""
import argparse
import json
import math
import os
import resource
import time

import numpy as np
import paddle
from paddle.distributed import fleet

SLOTS = 26
DENSE = 13
EMB_DIM = 9
FC_SIZES = [512, 256, 128, 32]


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_model(local):
    dense = paddle.static.data(name="dense_input", shape=[None, DENSE], dtype="float32")
    sparse = [paddle.static.data(name=f"C{i}", shape=[None, 1], dtype="int64") for i in range(1, SLOTS + 1)]
    label = paddle.static.data(name="label", shape=[None, 1], dtype="int64")
    pooled = []
    for ids in sparse:
        attr = paddle.ParamAttr(name="SparseFeatFactors", initializer=paddle.nn.initializer.Uniform(-0.01, 0.01))
        if local:  # fleetps-datagen's ids are below 2.6M
            emb = paddle.static.nn.embedding(input=ids, size=[2600001, EMB_DIM], is_sparse=True, param_attr=attr)
        else:  # a row per id in the pservers' hash table
            emb = paddle.static.nn.sparse_embedding(input=ids, size=[1000001, EMB_DIM], param_attr=attr)
        pooled.append(paddle.reshape(emb, [-1, EMB_DIM]))  # one id per slot: the sum is the row
    x = paddle.concat(pooled + [dense], axis=1)
    width = SLOTS * EMB_DIM + DENSE
    for size in FC_SIZES:
        x = paddle.static.nn.fc(
            x, size, activation="relu",
            weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1.0 / math.sqrt(width))))
        width = size
    logits = paddle.static.nn.fc(
        x, 2, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Normal(std=1.0 / math.sqrt(width))))
    predict = paddle.nn.functional.softmax(logits)
    loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
    # The cumulative statistics: one bucket of positives and negatives per threshold.
    auc, _, states = paddle.static.auc(input=predict, label=label, num_thresholds=2**12, slide_steps=20)
    return [dense] + sparse + [label], loss, auc, (states[2], states[3])


def auc_of(stats):
    """The AUC of the auc op's cumulative buckets (stat_pos, stat_neg), as Paddle computes it:
    a trapezoid per bucket, from the highest threshold down."""
    scope = paddle.static.global_scope()
    pos, neg = (np.array(scope.find_var(v.name).get_tensor(), dtype=np.float64).reshape(-1) for v in stats)
    pos, neg = pos[::-1], neg[::-1]
    seen_pos = np.cumsum(pos) - pos  # positives above each bucket
    area = float(np.sum(neg * (seen_pos + pos / 2)))
    total = pos.sum() * neg.sum()
    return area / total if total > 0 else 0.5


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train-file", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--local", action="store_true")
    args = p.parse_args()

    paddle.enable_static()
    if not args.local:
        fleet.init()  # PaddleCloudRoleMaker: the environment above
    use_var, loss, auc, auc_stats = build_model(args.local)
    if args.local:
        paddle.optimizer.Adam(learning_rate=0.001, lazy_mode=True).minimize(loss)
    else:
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = True
        strategy.a_sync_configs = {"k_steps": 0}  # async, no GEO
        fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate=0.001), strategy).minimize(loss)
        if fleet.is_server():
            fleet.init_server()
            fleet.run_server()  # serves until killed
            return

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    if not args.local:
        fleet.init_worker()
    dataset = paddle.distributed.QueueDataset()
    dataset.init(use_var=use_var, pipe_command="cat", batch_size=args.batch, thread_num=1)
    dataset.set_filelist([args.train_file])
    with open(args.train_file) as f:
        rows = sum(1 for _ in f)
    epochs = []
    for epoch in range(args.epochs):
        wall, cpu = time.time(), cpu_seconds()
        exe.train_from_dataset(program=paddle.static.default_main_program(), dataset=dataset,
                               fetch_list=[auc, loss], fetch_info=["auc", "loss"], print_period=100)
        wall, cpu = time.time() - wall, cpu_seconds() - cpu
        value = auc_of(auc_stats)
        epochs.append({"examples": rows, "seconds": wall, "cpu_seconds": cpu, "examples_per_sec": rows / wall,
                       "auc": value})
        print(f"epoch {epoch + 1}: {rows} examples in {wall:.2f} s = {rows / wall:.0f} examples/s, "
              f"cumulative auc {value:.4f}", flush=True)
    # Written before stop_worker: Paddle 2.6's client can crash while it tears down.
    with open(args.report, "w") as f:
        json.dump({"role": "trainer", "epochs": epochs}, f)
    if not args.local:
        fleet.stop_worker()
    os._exit(0)


if __name__ == "__main__":
    main()
