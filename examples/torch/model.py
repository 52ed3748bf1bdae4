"""The model and the data of the PyTorch example (train.py): a small transformer that
learns to sort a sequence of tokens, and where each kind of parallelism cuts it.

    tokens (batch, seq) -> embedding + position -> n_layers x Block -> norm -> output
    Block: x + Attention(norm1(x)), then + MLP(norm2(x))

The blocks sit in a ModuleDict keyed "0", "1", ..., so a pipeline stage that keeps only
some of them (and drops the embeddings or the head) names its parameters as the whole
model does: "layers.2.mlp.w1.weight" is the same tensor on one rank and on any grid.
"""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    vocab: int = 16        # tokens 0..15
    seq: int = 8           # sequence length
    dim: int = 32          # d_model
    heads: int = 4
    n_layers: int = 4
    batch: int = 32        # the global batch: every grid splits this one
    steps: int = 40
    lr: float = 1e-2
    seed: int = 0


class Attention(nn.Module):
    """Multi-head self-attention, no mask (the sort task sees the whole sequence).

    The number of heads is read from the width of q, so the same code runs a tensor
    parallel shard: with wq, wk, wv split by columns over T ranks each rank holds
    heads / T whole heads."""

    def __init__(self, cfg):
        super().__init__()
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.w2 = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """The whole model, or one pipeline stage of it (see pipeline_stage)."""

    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.LayerNorm(cfg.dim)
        self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, x):
        # A stage without the embeddings receives the previous stage's activations.
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for block in self.layers.values():
            x = block(x)
        if self.output is not None:
            x = self.output(self.norm(x))
        return x


def build(cfg):
    """The same initial weights on every rank: every rank draws them from one seed."""
    torch.manual_seed(cfg.seed)
    return Transformer(cfg)


def batch(cfg, step):
    """The global batch of one step: random tokens, and the same tokens sorted.

    Drawn from a generator seeded by the step, so every rank (and every run) sees the
    same data; each grid takes its share of these rows."""
    g = torch.Generator().manual_seed(1000 * cfg.seed + step)
    x = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)
    return x, x.sort(dim=1).values


def loss_fn(logits, y):
    """Mean cross entropy over every position of every sequence."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


# -- tensor parallelism: the plan --------------------------------------------------------

def tensor_parallel(model, mesh):
    """Splits every block over the 1-D DeviceMesh `mesh` (Megatron-LM's layout, with
    sequence parallelism between the blocks):

      - wq, wk, wv, w1 by output columns (ColwiseParallel): each rank computes its heads
        and its share of the MLP's hidden units, with no communication;
      - wo, w2 by input rows (RowwiseParallel): each rank's partial sums are added up,
        and the sum is scattered by sequence positions (a reduce-scatter);
      - the norms and the residual stream between the blocks hold 1/T of the sequence
        each (SequenceParallel); attention and the MLP first gather the whole sequence
        (an all-gather);
      - the embeddings by vocabulary rows, the head by vocabulary columns (its output,
        the logits, gathered whole on every rank, so the loss is computed as on 1 rank).

    Works on a pipeline stage too: only the parts the stage holds are named."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    plan = {}
    if model.tok is not None:
        plan["tok"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
        plan["pos"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    if model.output is not None:
        plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    for name in model.layers:
        p = f"layers.{name}."
        plan.update({
            p + "norm1": SequenceParallel(),
            p + "attn": PrepareModuleInput(input_layouts=(Shard(1),),
                                           desired_input_layouts=(Replicate(),)),
            p + "attn.wq": ColwiseParallel(),
            p + "attn.wk": ColwiseParallel(),
            p + "attn.wv": ColwiseParallel(),
            p + "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            p + "norm2": SequenceParallel(),
            p + "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                          desired_input_layouts=(Replicate(),)),
            p + "mlp.w1": ColwiseParallel(),
            p + "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        })
    return parallelize_module(model, mesh, plan)


# -- pipeline parallelism: the cut -------------------------------------------------------

def stage_layers(cfg, stage, n_stages):
    """The blocks of one stage: n_layers cut into n_stages runs of consecutive blocks,
    the first stages one longer when they do not divide evenly."""
    per, extra = divmod(cfg.n_layers, n_stages)
    first = stage * per + min(stage, extra)
    return range(first, first + per + (stage < extra))


def pipeline_stage(model, cfg, stage, n_stages):
    """Keeps what stage `stage` of n_stages computes and drops the rest: the first stage
    keeps the embeddings, the last the final norm and the head."""
    keep = {str(i) for i in stage_layers(cfg, stage, n_stages)}
    for name in list(model.layers):
        if name not in keep:
            del model.layers[name]
    if stage > 0:
        model.tok = model.pos = None
    if stage < n_stages - 1:
        model.norm = model.output = None
    return model
