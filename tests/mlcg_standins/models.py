"""Stand-ins for mlcg's SchNet, PaiNN, MLP, cutoffs, radial bases and output wrappers.

Attribute layout as in docs/mlcg-format.md §2.1, §5.1 and §5.4; the forward passes are a
direct evaluation of §5.2, §5.5 and §6 over a collated batch (see ``data.collate``),
written without any workbench code. The graph is rebuilt from positions by brute
force: every ordered pair of distinct beads of one structure closer than the
basis cutoff's upper value.
"""

from __future__ import annotations

import collections
import math
import typing

import torch
from torch import nn


class CosineCutoff(nn.Module):
    """``cutoff_lower == 0``: ½(cos(π r / r_c) + 1) below r_c; else the bump of §6.1."""

    def __init__(self, cutoff_lower=0.0, cutoff_upper=5.0):
        super().__init__()
        self.cutoff_lower = cutoff_lower
        self.cutoff_upper = cutoff_upper

    def forward(self, dist):
        lo, hi = self.cutoff_lower, self.cutoff_upper
        if lo > 0:
            value = 0.5 * (torch.cos(math.pi * (2.0 * (dist - lo) / (hi - lo) + 1.0)) + 1.0)
            return value * (dist < hi).to(dist.dtype) * (dist > lo).to(dist.dtype)
        return 0.5 * (torch.cos(dist * math.pi / hi) + 1.0) * (dist < hi).to(dist.dtype)


class IdentityCutoff(nn.Module):
    """1 everywhere."""

    def __init__(self, cutoff_lower=0, cutoff_upper=math.inf):
        super().__init__()
        self.cutoff_lower = cutoff_lower
        self.cutoff_upper = cutoff_upper

    def forward(self, dist):
        return torch.ones_like(dist)


class GaussianBasis(nn.Module):
    """exp(coeff (r − offset_k)²) · C(r)."""

    def __init__(self, cutoff, offset, coeff, trainable=False):
        super().__init__()
        self.cutoff = cutoff
        self.num_rbf = int(offset.shape[0])
        self.trainable = trainable
        if trainable:
            self.offset = nn.Parameter(offset)
            self.coeff = nn.Parameter(coeff)
        else:
            self.register_buffer("offset", offset)
            self.register_buffer("coeff", coeff)

    def forward(self, dist):
        return torch.exp(self.coeff * (dist.unsqueeze(-1) - self.offset) ** 2) * self.cutoff(
            dist
        ).unsqueeze(-1)


class ExpNormalBasis(nn.Module):
    """C(r) · exp(−β_k (exp(α (r_l − r)) − μ_k)²)."""

    def __init__(self, cutoff, means, betas, alpha, trainable=False):
        super().__init__()
        self.cutoff = cutoff
        self.num_rbf = int(means.shape[0])
        self.trainable = trainable
        self.alpha = alpha
        self.register_buffer("means", means)
        self.register_buffer("betas", betas)

    def forward(self, dist):
        inner = torch.exp(self.alpha * (self.cutoff.cutoff_lower - dist)).unsqueeze(-1)
        return self.cutoff(dist).unsqueeze(-1) * torch.exp(-self.betas * (inner - self.means) ** 2)


class MLP(nn.Module):
    """``layers``: Linear, activation, ..., Linear."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def _hook_dict():
    hooks = collections.OrderedDict()
    hooks.__orig_class__ = typing.OrderedDict
    return hooks


class CFConv(nn.Module):
    """Continuous-filter convolution, with the attributes of a PyG MessagePassing."""

    def __init__(self, lin1, filter_network, cutoff, lin2, inspector=None, aggr_module=None):
        super().__init__()
        self.aggr = "add"
        self.flow = "source_to_target"
        self.node_dim = 0
        self.inspector = inspector
        self._user_args = ["x_j", "W"]
        self._fused_user_args = []
        self._edge_user_args = ["W"]
        self.fuse = True
        self._explain = None
        self._edge_mask = None
        self._propagate_forward_pre_hooks = _hook_dict()
        self._propagate_forward_hooks = _hook_dict()
        if aggr_module is not None:
            self.aggr_module = aggr_module
        self.lin1 = lin1
        self.filter_network = filter_network
        self.cutoff = cutoff
        self.lin2 = lin2

    def forward(self, h, source, target, dist, rbf):
        weights = self.filter_network(rbf) * self.cutoff(dist).unsqueeze(-1)
        messages = self.lin1(h)[source] * weights
        summed = torch.zeros(h.shape[0], messages.shape[1], dtype=h.dtype).index_add(
            0, target, messages
        )
        return self.lin2(summed)


class InteractionBlock(nn.Module):
    """conv → activation → lin (the residual is added by the model)."""

    def __init__(self, conv, activation, lin):
        super().__init__()
        self.conv = conv
        self.activation = activation
        self.lin = lin

    def forward(self, h, source, target, dist, rbf):
        return self.lin(self.activation(self.conv(h, source, target, dist, rbf)))


class StandardSchNet(nn.Module):
    """SchNet energy of each structure of a collated batch, shape (B,)."""

    name = "SchNet"

    def __init__(self, embedding_layer, rbf_layer, interaction_blocks, output_network,
                 max_num_neighbors=1000):
        super().__init__()
        self.max_num_neighbors = max_num_neighbors
        self.self_interaction = False
        self.embedding_layer = embedding_layer
        self.rbf_layer = rbf_layer
        self.interaction_blocks = nn.ModuleList(interaction_blocks)
        self.output_network = output_network

    def energy(self, batch):
        pos, index = batch["pos"], batch["batch"]
        with torch.no_grad():
            far = torch.cdist(pos, pos)
            keep = (far < self.rbf_layer.cutoff.cutoff_upper) & (index[:, None] == index[None])
            keep &= ~torch.eye(pos.shape[0], dtype=torch.bool)
        source, target = torch.nonzero(keep).T
        dist = (pos[target] - pos[source]).norm(dim=-1)
        rbf = self.rbf_layer(dist)
        h = self.embedding_layer(batch["atom_types"])
        for block in self.interaction_blocks:
            h = h + block(h, source, target, dist, rbf)
        per_bead = self.output_network(h).squeeze(-1)
        return torch.zeros(batch["n_structures"], dtype=pos.dtype).index_add(0, index, per_bead)


class SchNet(StandardSchNet):
    """Same math under the other class name (flashmd's ``SchNet``)."""


def safe_norm_and_direction(diff):
    """mlcg's edge lengths ``sqrt(|r|² + 1e-16) − 1e-8``, shape (E, 1), and ``r / length``
    (left as ``r`` where the length is 0), shape (E, 3)."""
    dist = torch.sqrt(diff.square().sum(dim=1, keepdim=True) + 1e-16) - 1e-8
    direction = diff.clone()
    nonzero = (dist > 0).flatten()
    direction[nonzero] = diff[nonzero] / dist[nonzero]
    return dist, direction


class PaiNNInteraction(nn.Module):
    """PaiNN message block with the attributes of a PyG MessagePassing (§5.4).

    Features keep mlcg's layouts: scalars (N, 1, H), vectors (N, 3, H).
    """

    def __init__(self, hidden_channels, context_net, filter_network, cutoff):
        super().__init__()
        self.aggr = "add"
        self.flow = "source_to_target"
        self.node_dim = -2
        self.inspector = None
        self._propagate_forward_pre_hooks = _hook_dict()
        self._propagate_forward_hooks = _hook_dict()
        self.hidden_channels = hidden_channels
        self.interatomic_context_net = context_net
        self.filter_network = filter_network
        self.cutoff = cutoff

    def forward(self, q, mu, direction, source, target, dist, rbf):
        n_feat = self.hidden_channels
        filters = self.filter_network(rbf) * self.cutoff(dist).unsqueeze(-1)  # (E, 1, 3H)
        context = self.interatomic_context_net(q.squeeze(1))[source].unsqueeze(1)
        per_edge = filters * context
        d_scalar = per_edge[..., :n_feat]
        d_radial = per_edge[..., n_feat : 2 * n_feat]
        d_vector = per_edge[..., 2 * n_feat :]
        d_mu = d_radial * direction.unsqueeze(-1) + d_vector * mu[source]
        q = q + torch.zeros_like(q).index_add(0, target, d_scalar)
        mu = mu + torch.zeros_like(mu).index_add(0, target, d_mu)
        return q, mu


class PaiNNMixing(nn.Module):
    """PaiNN update block (§5.4)."""

    def __init__(self, hidden_channels, context_net, mu_channel_mix, epsilon=1e-8):
        super().__init__()
        self.hidden_channels = hidden_channels
        self.intraatomic_context_net = context_net
        self.mu_channel_mix = mu_channel_mix
        self.epsilon = epsilon

    def forward(self, q, mu):
        n_feat = self.hidden_channels
        mixed = self.mu_channel_mix(mu)
        mu_v, mu_w = mixed[..., :n_feat], mixed[..., n_feat:]
        norm_v = torch.sqrt(mu_v.square().sum(dim=-2, keepdim=True) + self.epsilon)
        context = self.intraatomic_context_net(torch.cat([q, norm_v], dim=-1))
        d_q = context[..., :n_feat]
        d_mu = context[..., n_feat : 2 * n_feat]
        d_qmu = context[..., 2 * n_feat :]
        q = q + d_q + d_qmu * (mu_v * mu_w).sum(dim=1, keepdim=True)
        return q, mu + d_mu * mu_w


class StandardPaiNN(nn.Module):
    """PaiNN energy of each structure of a collated batch, shape (B,)."""

    name = "PaiNN"

    def __init__(self, embedding_layer, rbf_layer, interaction_blocks, mixing_blocks,
                 output_network, max_num_neighbors=1000):
        super().__init__()
        self.embedding_layer = embedding_layer
        self.interaction_blocks = nn.ModuleList(interaction_blocks)
        self.mixing_blocks = nn.ModuleList(mixing_blocks)
        self.output_network = output_network
        self.rbf_layer = rbf_layer
        self.max_num_neighbors = max_num_neighbors
        self.nls_distance_method = "torch"

    def energy(self, batch):
        pos, index = batch["pos"], batch["batch"]
        with torch.no_grad():
            far = torch.cdist(pos, pos)
            keep = (far < self.rbf_layer.cutoff.cutoff_upper) & (index[:, None] == index[None])
            keep &= ~torch.eye(pos.shape[0], dtype=torch.bool)
        source, target = torch.nonzero(keep).T
        dist, direction = safe_norm_and_direction(pos[target] - pos[source])
        rbf = self.rbf_layer(dist)  # (E, 1, K)
        q = self.embedding_layer(batch["atom_types"]).unsqueeze(1)
        mu = torch.zeros(q.shape[0], 3, q.shape[2], dtype=q.dtype)
        for interaction, mixing in zip(self.interaction_blocks, self.mixing_blocks, strict=True):
            q, mu = interaction(q, mu, direction, source, target, dist, rbf)
            q, mu = mixing(q, mu)
        per_bead = self.output_network(q.squeeze(1)).squeeze(-1)
        return torch.zeros(batch["n_structures"], dtype=pos.dtype).index_add(0, index, per_bead)


class RBFRegularizedPaiNN(StandardPaiNN):
    """Shape-only stand-in of a PaiNN variant that is refused."""


class GradientsOut(nn.Module):
    """Wraps a model; ``name`` is the wrapped model's name."""

    def __init__(self, model, name=None):
        super().__init__()
        self.model = model
        self.name = name if name is not None else model.name
        self.targets = ["forces"]


class SumOut(nn.Module):
    """Sum of its models' energies, and forces −∂E/∂pos."""

    def __init__(self, models):
        super().__init__()
        self.models = nn.ModuleDict(models)
        self.targets = ["energy", "forces"]

    def energies(self, batch):
        """Per-entry energies, each shape (B,)."""
        return {key: wrapper.model.energy(batch) for key, wrapper in self.models.items()}

    def forward(self, batch):
        """Energies (B,) and forces (N, 3) of a collated batch."""
        pos = batch["pos"].detach().requires_grad_(True)
        batch = dict(batch, pos=pos)
        energy = sum(self.energies(batch).values())
        (grad,) = torch.autograd.grad(energy.sum(), pos)
        return energy.detach(), -grad
