"""deepmd-kit interoperability of :class:`~workbench.model.deep_potential.CGDeepPotential`.

Covered: energy models of deepmd-kit's PyTorch backend, versions 3.1 and 3.2, with the
descriptor ``se_e2_a`` (alias ``se_a``) and the fitting ``ener`` — the standard model
(``type`` absent or ``"standard"``), without frame or atomic parameters
(``numb_fparam = numb_aparam = dim_case_embd = 0``), ``atom_ener``, shared fitting layers
(``layer_name``), type or pair exclusions, environment protection (``env_protection``),
tabulated pair terms (``use_srtab``), spin or multi-task heads; activation ``tanh``,
``softplus`` or ``silu``, the same for both kinds of network. Anything else is refused
with :class:`DeepmdFormatError` naming the option.

* **Reading** (`read_deepmd`): a training checkpoint ``model.ckpt*.pt`` of
  ``dp --pt train`` (``torch.load(weights_only=True)``: tensors and plain containers only;
  the model's parameters are its ``_extra_state``) or a frozen ``.pth`` of
  ``dp --pt freeze`` (a TorchScript archive, loaded with ``torch.jit.load`` without running
  any of its methods but ``get_model_def_script``). Neither needs deepmd-kit installed.
* **Converting** (`network_from_deepmd`): deepmd-kit's types become bead types through
  their names in ``type_map`` (`bead_type_names`); the result reproduces deepmd-kit's
  formulas exactly (`workbench.model.deep_potential`, ``sel``).
* **Exporting** (`to_deepmd`, `save_deepmd`): a ``CGDeepPotential`` becomes deepmd-kit's
  model parameters and state dict; `save_deepmd` writes a checkpoint that deepmd-kit
  (``deepmd.infer.DeepPot``, ``dp --pt test``, ``dp --pt freeze``) loads, and needs
  deepmd-kit installed.
* **deepmd-kit as a backend** (`DeepmdBackend`): deepmd-kit's own PyTorch model, built
  from the network's weights, evaluates the energies (``network.backend = "deepmd"``).

deepmd-kit keeps a bead's ``Σ sel`` nearest neighbours within ``rcut`` and of those the
``sel[t]`` nearest of type ``t``; the engine's path keeps all of them, so the two agree
while no bead has more neighbours of a type than that (deepmd-kit's own requirement on
``sel``). deepmd-kit as a backend keeps what deepmd-kit keeps, and warns when it drops
a neighbour.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.model.deep_potential import CGDeepPotential, DeepPotentialConfig
from workbench.model.io import ModelFormatError
from workbench.model.potential import Potential
from workbench.neighbors import Graph
from workbench.system.cg_system import CGSystem
from workbench.system.mapping import BACKBONE_TYPES
from workbench.system.residues import ONE_LETTER, cb_type

#: deepmd-kit versions whose models are covered (the ``deepmd`` extra pins the same range).
SUPPORTED_VERSIONS = ">=3.1,<3.3"

#: deepmd-kit's activation names that the engine's networks compute identically.
ACTIVATION_NAMES = {"tanh": "tanh", "softplus": "softplus", "silu": "silu"}

#: Prefix of the descriptor's and the fitting's state-dict keys in an energy model.
_DESCRIPTOR = "atomic_model.descriptor.sea."
_FITTING = "atomic_model.fitting_net."
#: Prefix of a single-task training checkpoint's model keys.
_CHECKPOINT_PREFIX = "model.Default."


class DeepmdFormatError(ModelFormatError):
    """A deepmd-kit model that cannot be read or is not covered (the message says which
    option)."""


def bead_type_names() -> dict[str, int]:
    """Symbolic names of bead types that a deepmd-kit ``type_map`` may use.

    The five-bead mapping's backbone beads ``N``, ``CA``, ``C``, ``O`` (21-24) and a
    residue's side-chain bead by the residue's three-letter name (``ALA`` 1 ... ``TYR``
    20; ``GLY`` 6, the type of glycine's CA). Besides these, a number (``"0"``, ...) names
    any type.

    Returns
    -------
    dict of str to int
    """
    return {**BACKBONE_TYPES, **{name: cb_type(name) for name in ONE_LETTER}}


def bead_type_name(bead_type: int) -> str:
    """The name `to_deepmd` gives a bead type in ``type_map``: its symbolic name of
    `bead_type_names` where it has one, else its number."""
    for name, value in bead_type_names().items():
        if value == bead_type:
            return name
    return str(bead_type)


@dataclass
class DeepmdModel:
    """A deepmd-kit energy model as plain data.

    Attributes
    ----------
    params : dict
        deepmd-kit's model parameters (``type_map``, ``descriptor``, ``fitting_net``, ...),
        as in its input file's ``model`` section.
    state : dict of str to torch.Tensor
        The energy model's state dict (keys ``atomic_model.…``).
    """

    params: dict
    state: dict[str, torch.Tensor]


def read_deepmd(path: str | os.PathLike) -> DeepmdModel:
    """A deepmd-kit model file: a training checkpoint ``.pt`` or a frozen ``.pth``.

    Raises
    ------
    FileNotFoundError
        No such file.
    DeepmdFormatError
        Not a deepmd-kit PyTorch model, or a multi-task one.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no deepmd-kit model at {path}")
    if path.suffix == ".pth":
        try:
            module = torch.jit.load(str(path), map_location="cpu")
            params = json.loads(module.get_model_def_script())
        except Exception as exc:  # noqa: BLE001 - any failure means not a frozen model
            raise DeepmdFormatError(f"{path} is not a frozen deepmd-kit PyTorch model "
                                    f"(dp --pt freeze): {exc}") from exc
        return DeepmdModel(params, {k: v.detach() for k, v in module.state_dict().items()})
    state = _checkpoint_state(path)
    params = state["_extra_state"]["model_params"]
    if "model_dict" in params:
        raise DeepmdFormatError(f"{path} is a multi-task deepmd-kit model; convert one head "
                                "first (dp --pt change-bias / freeze --head)")
    return DeepmdModel(params, {k[len(_CHECKPOINT_PREFIX):]: v for k, v in state.items()
                                if k.startswith(_CHECKPOINT_PREFIX)})


def _checkpoint_state(path: Path) -> dict:
    """The model state of a training checkpoint (``torch.load`` with ``weights_only``),
    which holds the model's parameters as ``_extra_state.model_params``."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a format error
        raise DeepmdFormatError(f"{path} is not a readable deepmd-kit checkpoint: {exc}") from exc
    state = payload.get("model", payload) if isinstance(payload, dict) else None
    extra = state.get("_extra_state") if isinstance(state, dict) else None
    if not isinstance(extra, dict) or not isinstance(extra.get("model_params"), dict):
        raise DeepmdFormatError(f"{path} is not a deepmd-kit PyTorch checkpoint (dp --pt train): "
                                "it has no model._extra_state.model_params")
    return state


def is_deepmd_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a deepmd-kit PyTorch model: a frozen ``.pth``, or a ``.pt``
    checkpoint with the model's parameters."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.suffix == ".pth":
        return True
    try:
        _checkpoint_state(path)
    except DeepmdFormatError:
        return False
    return True


# -- reading the parameters -------------------------------------------------------------------
def _refuse_set(section: str, params: dict, key: str, default) -> None:
    """Refuse ``params[key]`` unless absent, None or ``default``."""
    if params.get(key) not in (None, default):
        raise DeepmdFormatError(
            f"deepmd-kit option {section}.{key} = {params[key]!r} is not supported (only "
            f"{default!r}); covered: se_e2_a + ener energy models of deepmd-kit "
            f"{SUPPORTED_VERSIONS}")


def _check_params(params: dict) -> tuple[dict, dict, str]:
    """The descriptor and fitting sections and the activation; refusals name the option."""
    if params.get("bridging_method", "None") not in ("None", None):
        raise DeepmdFormatError(f"deepmd-kit option model.bridging_method = "
                                f"{params['bridging_method']!r} is not supported")
    if params.get("type", "standard") != "standard":
        raise DeepmdFormatError(f"deepmd-kit model type {params['type']!r} is not supported "
                                "(only the standard model: se_e2_a + ener)")
    for key in ("use_srtab", "spin"):
        if params.get(key):
            raise DeepmdFormatError(f"deepmd-kit option model.{key} is not supported")
    for key in ("pair_exclude_types", "atom_exclude_types"):
        _refuse_set("model", params, key, [])
    descriptor, fitting = params.get("descriptor", {}), params.get("fitting_net", {})
    if descriptor.get("type") not in ("se_e2_a", "se_a"):
        raise DeepmdFormatError(
            f"deepmd-kit descriptor {descriptor.get('type')!r} is not supported; covered: "
            "se_e2_a (alias se_a) with the fitting ener")
    if fitting.get("type", "ener") != "ener":
        raise DeepmdFormatError(f"deepmd-kit fitting {fitting.get('type')!r} is not "
                                "supported; covered: ener (energy)")
    _refuse_set("descriptor", descriptor, "exclude_types", [])
    _refuse_set("descriptor", descriptor, "env_protection", 0.0)
    for key in ("numb_fparam", "numb_aparam", "dim_case_embd"):
        _refuse_set("fitting_net", fitting, key, 0)
    _refuse_set("fitting_net", fitting, "atom_ener", [])
    _refuse_set("fitting_net", fitting, "layer_name", None)
    _refuse_set("fitting_net", fitting, "exclude_types", [])
    activations = {descriptor.get("activation_function", "tanh"),
                   fitting.get("activation_function", "tanh")}
    if len(activations) > 1:
        raise DeepmdFormatError(f"descriptor and fitting_net use different activations "
                                f"{sorted(activations)}; the engine's Deep Potential has one")
    (activation,) = activations
    if activation not in ACTIVATION_NAMES:
        raise DeepmdFormatError(f"deepmd-kit activation {activation!r} is not supported; "
                                f"covered: {', '.join(ACTIVATION_NAMES)}")
    return descriptor, fitting, ACTIVATION_NAMES[activation]


def _layers(state: dict, prefix: str) -> list[dict[str, torch.Tensor]]:
    """``matrix``/``bias``/``idt`` of the layers ``prefix{l}.`` in order."""
    layers = []
    while f"{prefix}{len(layers)}.matrix" in state:
        at = f"{prefix}{len(layers)}."
        layers.append({k: state[at + k] for k in ("matrix", "bias", "idt") if at + k in state})
    return layers


def _networks(state: dict, prefix: str) -> list[list[dict[str, torch.Tensor]]]:
    """The layers (`_layers`) of each network ``prefix networks.{k}``."""
    nets = []
    while f"{prefix}networks.{len(nets)}.layers.0.matrix" in state:
        nets.append(_layers(state, f"{prefix}networks.{len(nets)}.layers."))
    if not nets:
        raise DeepmdFormatError(f"no networks under {prefix} in the deepmd-kit state dict")
    return nets


def _statistics(state: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The descriptor's ``(K, nnei, 4)`` mean and deviation as ``(K, 4)`` per centre type;
    they must be the same for every slot and leave directions alone (zero mean and one
    deviation of the three direction columns), as deepmd-kit's statistics do."""
    mean, std = state[_DESCRIPTOR + "mean"], state[_DESCRIPTOR + "stddev"]
    for stat, name in ((mean, "mean"), (std, "stddev")):
        if not torch.equal(stat, stat[:, :1].expand_as(stat)):
            raise DeepmdFormatError(f"the descriptor's {name} differs between neighbour "
                                    "slots; covered: deepmd-kit's statistics per centre type")
    mean, std = mean[:, 0], std[:, 0]
    if mean[:, 1:].any() or not torch.equal(std[:, 1:], std[:, 1:2].expand(-1, 3)):
        raise DeepmdFormatError("the descriptor's statistics of the direction columns are "
                                "not zero means and one deviation per type: the model would "
                                "not be rotation invariant")
    return mean, std


def _bead_types(type_map: Sequence[str], type_names: Mapping[str, int] | None) -> list[int]:
    """The bead type of each ``type_map`` name (`bead_type_names`, then ``type_names``)."""
    names = {**bead_type_names(), **(type_names or {})}
    unknown = [n for n in type_map if n not in names and not n.isdigit()]
    if unknown:
        raise DeepmdFormatError(
            f"type_map names {unknown} are no bead types; give type_names (deepmd-kit name to "
            "bead type), or use the names N, CA, C, O, a residue's three-letter name or a "
            "type's number")
    types = [names[n] if n in names else int(n) for n in type_map]
    if len(set(types)) != len(types):
        raise DeepmdFormatError(f"type_map {list(type_map)} names a bead type twice: {types}")
    return types


def network_from_deepmd(
    model: DeepmdModel,
    type_names: Mapping[str, int] | None = None,
    embedding_size: int | None = None,
) -> tuple[CGDeepPotential, list[int]]:
    """The engine's Deep Potential of a deepmd-kit se_e2_a + ener model.

    Parameters
    ----------
    model : DeepmdModel
        From `read_deepmd` or `to_deepmd`.
    type_names : mapping of str to int, optional
        Bead type of each deepmd-kit type name, beyond (or instead of) `bead_type_names`.
    embedding_size : int, optional
        Least number of bead types of the network (it has at least 1 + the largest mapped
        one). Types that are not in ``type_map`` get zero networks and no neighbour slots.

    Returns
    -------
    network : CGDeepPotential
        In the checkpoint's floating-point precision; ``sel`` set, the statistics loaded.
    bead_types : list of int
        The bead type of each entry of ``type_map``.

    Raises
    ------
    DeepmdFormatError
        An option that is not covered, a type name that is no bead type, or a state dict
        that does not match the parameters.
    """
    descriptor, _, activation = _check_params(model.params)
    types = _bead_types(model.params["type_map"], type_names)
    size = max(embedding_size or 0, max(types) + 1)
    state = model.state
    embedding = _networks(state, _DESCRIPTOR + "filter_layers.")
    fitting_nets = _networks(state, _FITTING + "filter_layers.")
    widths = [layer["matrix"].shape[1] for layer in embedding[0]]
    hidden = [layer["matrix"].shape[1] for layer in fitting_nets[0][:-1]]
    axis = fitting_nets[0][0]["matrix"].shape[0] // widths[-1]
    if axis != descriptor.get("axis_neuron", axis):
        raise DeepmdFormatError(f"axis_neuron {descriptor['axis_neuron']} does not match the "
                                f"fitting network's input width {axis * widths[-1]}")
    kinds = len(types)
    # from the networks: deepmd-kit's classes and its input file differ in the default
    one_side = len(embedding) == kinds
    if (not one_side and len(embedding) != kinds * kinds) or (
            kinds > 1 and descriptor.get("type_one_side", one_side) != one_side):
        raise DeepmdFormatError(f"{len(embedding)} embedding networks for {kinds} types and "
                                f"type_one_side {descriptor.get('type_one_side')}")
    counts = descriptor.get("sel")
    if not isinstance(counts, list) or len(counts) != kinds or "rcut" not in descriptor or (
            "rcut_smth" not in descriptor):
        raise DeepmdFormatError(f"the descriptor needs rcut, rcut_smth and sel, a count for "
                                f"each of the {kinds} types; got {descriptor}")
    sel = [0] * size
    for kind, count in zip(types, counts, strict=True):
        sel[kind] = int(count)
    config = DeepPotentialConfig(
        embedding_size=size, cutoff=float(descriptor["rcut"]),
        cutoff_smooth=float(descriptor["rcut_smth"]), embedding_widths=widths,
        axis_neurons=axis, fitting_widths=hidden, num_neighbors=float(sum(sel)),
        type_one_side=one_side, activation=activation,
        embedding_resnet_dt=any("idt" in layer for layer in embedding[0]),
        fitting_resnet_dt=any("idt" in layer for layer in fitting_nets[0]),
        sel=sel)
    dtype = embedding[0][0]["matrix"].dtype
    network = CGDeepPotential(config).to(dtype)
    with torch.no_grad():
        for tensor in network.parameters():
            tensor.zero_()
        mean, std = _statistics(state)
        network.env_mean[types], network.env_std[types] = mean.to(dtype), std.to(dtype)
        for index, layers in enumerate(embedding):
            # deepmd-kit's network index is neighbour-type major: (neighbour, centre)
            neighbour, centre = divmod(index, 1 if one_side else kinds)
            net = types[neighbour] if one_side else types[centre] * size + types[neighbour]
            _set_layers(layers, net, network.embedding_weights, network.embedding_biases,
                        network.embedding_timesteps)
        bias = state[_FITTING + "bias_atom_e"].reshape(kinds)
        out_bias = state.get("atomic_model.out_bias")
        if out_bias is not None:
            bias = bias + out_bias.reshape(-1, kinds)[0]
        if len(fitting_nets) != kinds:
            raise DeepmdFormatError(f"{len(fitting_nets)} fitting networks for {kinds} types")
        for kind, layers in zip(types, fitting_nets, strict=True):
            _set_layers(layers[:-1], kind, network.fitting_weights, network.fitting_biases,
                        network.fitting_timesteps)
            network.fitting_out[kind] = layers[-1]["matrix"][:, 0]
        network.energy_bias[types] = (bias + torch.stack([n[-1]["bias"][0] for n in fitting_nets])
                                      ).to(dtype)
    return network, types


def _set_layers(layers, net, weights, biases, timesteps) -> None:
    """deepmd-kit's layers (`_layers`) into network ``net`` of the engine's stacks."""
    if len(layers) != len(weights):
        raise DeepmdFormatError(f"a network has {len(layers)} layers, the first one "
                                f"{len(weights)}")
    for index, layer in enumerate(layers):
        weights[index][net] = layer["matrix"]
        biases[index][net] = layer["bias"]
        if "idt" in layer:
            timesteps[str(index)][net] = layer["idt"]


# -- exporting --------------------------------------------------------------------------------
def to_deepmd(
    network: CGDeepPotential,
    bead_types: Sequence[int] | None = None,
    sel: Sequence[int] | None = None,
) -> DeepmdModel:
    """deepmd-kit's form of ``network``: model parameters and the weights of its state dict.

    Parameters
    ----------
    network : CGDeepPotential
    bead_types : sequence of int, optional
        The bead types that become deepmd-kit's types, in ``type_map`` order (names by
        `bead_type_name`). Default: those with neighbour slots (``config.sel``), else all.
    sel : sequence of int, optional
        deepmd-kit's neighbour slots per exported type. Default and required value where
        the network has ``sel``: its own. Without, the slots are free (deepmd-kit drops
        neighbours beyond them), and ``(Σ sel / N_c)²`` is folded into the first fitting
        layer (the output layer where there is no hidden one).

    Returns
    -------
    DeepmdModel
        ``state`` holds the descriptor's statistics, the networks and ``bias_atom_e``;
        the output layers' biases and ``out_bias`` are zero (keys of deepmd-kit's own
        buffers are left out: `deepmd_module` takes them from a fresh model).

    Raises
    ------
    ValueError
        ``sel`` missing or inconsistent, a bead type outside the network, or a fold into a
        first fitting layer with a shortcut.
    """
    config = network.config
    if bead_types is None:
        bead_types = ([t for t, n in enumerate(config.sel) if n > 0] if config.sel is not None
                      else list(range(config.embedding_size)))
    bead_types = [int(t) for t in bead_types]
    if not bead_types or max(bead_types) >= config.embedding_size or min(bead_types) < 0:
        raise ValueError(f"bead_types must lie in [0, {config.embedding_size}), got {bead_types}")
    if config.sel is not None:
        own = [config.sel[t] for t in bead_types]
        if sum(own) != sum(config.sel) or (sel is not None and list(sel) != own):
            raise ValueError(f"the network has deepmd-kit's neighbour lists (sel {config.sel}):"
                             f" export every type with slots and its own sel ({own} for "
                             f"{bead_types})")
        sel = own
    elif sel is None or len(sel) != len(bead_types) or min(sel) < 1:
        raise ValueError(f"give sel, a neighbour count >= 1 for each of {bead_types}")
    sel = [int(n) for n in sel]
    scale = (sum(sel) / config.num_neighbors) ** 2  # D scales with (1 / N_c)²
    first_shortcut = config.fitting_widths and config.fitting_widths[0] in (
        config.embedding_widths[-1] * config.axis_neurons * m for m in (1, 2))
    if scale != 1.0 and first_shortcut:
        raise ValueError(f"sel must sum to num_neighbors = {config.num_neighbors}: the first "
                         "fitting layer has a shortcut from the descriptor")
    kinds, size = len(bead_types), config.embedding_size
    activation = {v: k for k, v in ACTIVATION_NAMES.items()}[config.activation]
    precision = {torch.float64: "float64", torch.float32: "float32"}[network.fitting_out.dtype]
    params = {
        "type_map": [bead_type_name(t) for t in bead_types],
        "descriptor": {"type": "se_e2_a", "sel": sel, "rcut": config.cutoff,
                       "rcut_smth": config.cutoff_smooth, "neuron": list(config.embedding_widths),
                       "axis_neuron": config.axis_neurons, "resnet_dt": config.embedding_resnet_dt,
                       "type_one_side": config.type_one_side, "activation_function": activation,
                       "precision": precision},
        "fitting_net": {"type": "ener", "neuron": list(config.fitting_widths),
                        "resnet_dt": config.fitting_resnet_dt, "activation_function": activation,
                        "precision": precision},
    }
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        if config.sel is not None:
            mean = network.env_mean[bead_types]
            std = network.env_std[bead_types]
        else:
            mean = network.fitting_out.new_zeros(kinds, 4)
            std = torch.ones_like(mean)
        state[_DESCRIPTOR + "mean"] = mean[:, None].expand(kinds, sum(sel), 4).clone()
        state[_DESCRIPTOR + "stddev"] = std[:, None].expand(kinds, sum(sel), 4).clone()
        for index in range(kinds if config.type_one_side else kinds * kinds):
            neighbour, centre = divmod(index, 1 if config.type_one_side else kinds)
            net = (bead_types[neighbour] if config.type_one_side
                   else bead_types[centre] * size + bead_types[neighbour])
            _get_layers(state, f"{_DESCRIPTOR}filter_layers.networks.{index}.layers.", net,
                        network.embedding_weights, network.embedding_biases,
                        network.embedding_timesteps)
        for k, kind in enumerate(bead_types):
            at = f"{_FITTING}filter_layers.networks.{k}.layers."
            _get_layers(state, at, kind, network.fitting_weights, network.fitting_biases,
                        network.fitting_timesteps)
            last = len(config.fitting_widths)
            out = network.fitting_out[kind][:, None].clone()
            if last:
                state[f"{at}0.matrix"] = state[f"{at}0.matrix"] * scale
            else:
                out = out * scale
            state[f"{at}{last}.matrix"] = out
            state[f"{at}{last}.bias"] = out.new_zeros(1)
        state[_FITTING + "bias_atom_e"] = network.energy_bias[bead_types][:, None].clone()
        state["atomic_model.out_bias"] = network.energy_bias.new_zeros(1, kinds, 1)
    return DeepmdModel(params, state)


def _get_layers(state, prefix, net, weights, biases, timesteps) -> None:
    """Network ``net`` of the engine's stacks into deepmd-kit's keys ``prefix{l}.…``."""
    for index, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        state[f"{prefix}{index}.matrix"] = weight[net].detach().clone()
        state[f"{prefix}{index}.bias"] = bias[net].detach().clone()
        if str(index) in timesteps:
            state[f"{prefix}{index}.idt"] = timesteps[str(index)][net].detach().clone()


def _deepmd_pt():
    """deepmd-kit's PyTorch backend (``deepmd.pt``), or an ImportError that says how to get
    it."""
    try:
        from deepmd.pt.model.model import get_model
        from deepmd.pt.train.wrapper import ModelWrapper
    except Exception as exc:  # noqa: BLE001 - a missing package or a broken binary op
        raise ImportError(
            f"deepmd-kit's PyTorch backend does not import ({exc}); install deepmd-kit "
            f"{SUPPORTED_VERSIONS} (pip install 'cg-workbench[deepmd]'; with a torch other "
            "than its wheel's, build it: DP_ENABLE_PYTORCH=0 DP_ENABLE_TENSORFLOW=0 pip "
            "install deepmd-kit --no-binary deepmd-kit)") from exc
    return get_model, ModelWrapper


def deepmd_module(model: DeepmdModel) -> torch.nn.Module:
    """deepmd-kit's own energy model (eager, in evaluation mode, on deepmd-kit's default
    device) with ``model``'s weights, the rest of its state as deepmd-kit initialises it.

    Raises
    ------
    ImportError
        deepmd-kit's PyTorch backend is not installed or does not import.
    DeepmdFormatError
        A weight of ``model`` that deepmd-kit's model does not have, or of another shape.
    """
    get_model, _ = _deepmd_pt()
    module = get_model(json.loads(json.dumps(model.params)))  # it fills defaults in place
    full = module.state_dict()
    wrong = [k for k, v in model.state.items() if k not in full or full[k].shape != v.shape]
    if wrong:
        raise DeepmdFormatError(f"deepmd-kit's model has no weights {wrong} of these shapes")
    full.update({k: v.to(full[k].dtype) for k, v in model.state.items()})
    module.load_state_dict(full)
    return module.eval()


def save_deepmd(network: CGDeepPotential, path: str | os.PathLike, **kwargs) -> Path:
    """Write ``network`` as a deepmd-kit PyTorch checkpoint (``.pt``) that deepmd-kit's
    inference (``deepmd.infer.DeepPot``) and tools (``dp --pt freeze``) read.

    Parameters
    ----------
    network : CGDeepPotential
    path : path-like, ending in ``.pt``
    **kwargs
        ``bead_types``, ``sel`` of `to_deepmd`.

    Raises
    ------
    ImportError
        deepmd-kit's PyTorch backend is not installed or does not import.
    """
    path = Path(path)
    if path.suffix != ".pt":
        raise ValueError(f"a deepmd-kit checkpoint ends in .pt, got {path.name}")
    _, wrapper = _deepmd_pt()
    model = to_deepmd(network, **kwargs)
    state = wrapper(deepmd_module(model), model_params=model.params).state_dict()
    torch.save({"model": state}, path)
    return path


def deepmd_potential(path: str | os.PathLike, system: CGSystem,
                     type_names: Mapping[str, int] | None = None) -> Potential:
    """A deepmd-kit model's Deep Potential (float32) with the native priors of ``system``
    (`workbench.model.native_priors.native_priors`).

    Parameters
    ----------
    path : path-like
        A deepmd-kit checkpoint ``.pt`` or frozen ``.pth`` (`read_deepmd`).
    system : CGSystem
    type_names : mapping of str to int, optional
        As in `network_from_deepmd`.

    Returns
    -------
    Potential
        ``metadata``: ``source`` ``"deepmd-kit"``, ``file``, ``type_map`` (deepmd-kit's
        names) and ``trained`` True.

    Raises
    ------
    DeepmdFormatError
        As `read_deepmd` and `network_from_deepmd`, or a bead type of ``system`` that the
        model's ``type_map`` does not name.
    """
    from workbench.model.native_priors import native_priors

    model = read_deepmd(path)
    network, types = network_from_deepmd(model, type_names,
                                         embedding_size=int(system.bead_types.max()) + 1)
    missing = sorted(set(system.bead_types.tolist()) - set(types))
    if missing:
        raise DeepmdFormatError(
            f"the deepmd-kit model's type_map {model.params['type_map']} has no type for the "
            f"bead types {[bead_type_name(t) for t in missing]} of {system.name}")
    potential = Potential(system.bead_types, network.float(), native_priors(system))
    potential.metadata = {"source": "deepmd-kit", "file": str(path), "trained": True,
                          "type_map": list(model.params["type_map"])}
    return potential


def deepmd_backend_problem(network: CGDeepPotential) -> str | None:
    """Why deepmd-kit cannot evaluate ``network`` here (`DeepmdBackend`), or None."""
    if network.config.sel is None:
        return ("the network has no deepmd-kit neighbour lists (sel): only a converted "
                "deepmd-kit model or the demo model runs through deepmd-kit")
    try:
        _deepmd_pt()
    except ImportError as exc:
        return str(exc)
    return None


# -- deepmd-kit as a backend ------------------------------------------------------------------
def typed_neighbor_list(pos: torch.Tensor, kinds: torch.Tensor, graph: Graph, cutoff: float,
                        sel: Sequence[int]) -> tuple[torch.Tensor, int]:
    """deepmd-kit's neighbour list of the engine's graph, as its own builder makes it: of
    each centre's ``Σ sel`` nearest neighbours within ``cutoff``, those of deepmd-kit type
    ``k`` in the ``sel[k]`` slots of block ``k``, nearest first; the rest ``-1``. The
    neighbours within ``cutoff`` that find no slot are dropped, and counted.

    Parameters
    ----------
    pos : torch.Tensor, shape (N, 3)
    kinds : torch.Tensor, shape (N,), int64
        deepmd-kit type of each bead.
    graph : Graph
    cutoff : float
    sel : sequence of int

    Returns
    -------
    nlist : torch.Tensor, shape (N, Σ sel), int64
    dropped : int
        Neighbours within ``cutoff`` left out (one host read).
    """
    src, dst = graph.src, graph.dst
    with torch.no_grad():
        keep = (torch.ones_like(src, dtype=torch.bool) if graph.valid is None
                else graph.valid.clone())
        src, dst = torch.where(keep, src, 0), torch.where(keep, dst, 0)
        r = torch.linalg.vector_norm(pos.index_select(0, src) - pos.index_select(0, dst), dim=-1)
        keep &= r < cutoff
        src, dst, r = src[keep], dst[keep], r[keep]
    within = src.numel()
    order = torch.argsort(r, stable=True)  # by centre, nearest first
    order = order.index_select(0, torch.argsort(dst.index_select(0, order), stable=True))
    src, dst = src.index_select(0, order), dst.index_select(0, order)
    nearest = _rank(dst, pos.shape[0]) < sum(sel)
    src, dst = src[nearest], dst[nearest]
    kind = kinds.index_select(0, src)
    group = dst * len(sel) + kind
    order = torch.argsort(group, stable=True)  # by centre and type, still nearest first
    src, dst, kind, group = (x.index_select(0, order) for x in (src, dst, kind, group))
    rank = _rank(group, pos.shape[0] * len(sel))
    slots = torch.as_tensor(list(sel), device=group.device)
    fits = rank < slots.index_select(0, kind)
    slot = (torch.cumsum(slots, 0) - slots).index_select(0, kind) + rank
    nlist = torch.full((pos.shape[0], int(sum(sel))), -1, dtype=torch.long, device=pos.device)
    nlist[dst[fits], slot[fits]] = src[fits]
    return nlist, within - int(fits.sum())


def _rank(keys: torch.Tensor, count: int) -> torch.Tensor:
    """Each row's place within its run of equal ``keys`` (sorted, in ``[0, count)``)."""
    sizes = torch.bincount(keys, minlength=count)
    return torch.arange(keys.numel(), device=keys.device) - (
        torch.cumsum(sizes, 0) - sizes).index_select(0, keys)


class DeepmdBackend:
    """deepmd-kit's own energy model evaluating a ``CGDeepPotential``'s weights.

    The model is built once per device, precision, set of bead types and state of the
    weights (`to_deepmd`, `deepmd_module`; deepmd-kit's types are the bead types with
    neighbour slots and those evaluated). All replicas form one frame of deepmd-kit's
    lower interface (``forward_common_atomic``) with the engine's graph as its neighbour
    list (`typed_neighbor_list`); forces are the engine's −∂E/∂r through deepmd-kit's
    operations. Needs a network with ``sel`` (a converted deepmd-kit model, or the demo
    model, `workbench.model.native_priors.demo_config`). Where deepmd-kit drops
    neighbours (a bead with more neighbours of a type than its slots), its energies differ
    from the engine's path, which keeps them all: the first such evaluation warns.
    """

    def __init__(self):
        self._key = None
        self._module = None
        self._warned = False

    def node_energies(self, network: CGDeepPotential, pos: torch.Tensor, types: torch.Tensor,
                      graph: Graph) -> torch.Tensor:
        """Per-node energies of deepmd-kit's model of ``network``.

        Parameters
        ----------
        network : CGDeepPotential
            With ``config.sel``.
        pos : torch.Tensor, shape (N, 3)
            All replicas' beads; cast to the network's precision for deepmd-kit.
        types : torch.Tensor, shape (N,), int64
            Bead types.
        graph : Graph
            The engine's graph (`typed_neighbor_list`).

        Returns
        -------
        torch.Tensor, shape (N,), dtype of ``pos``
            Differentiable with respect to ``pos``.
        """
        sel = network.config.sel
        if sel is None:
            raise ValueError("the deepmd backend runs networks with deepmd-kit's neighbour "
                             "lists (config.sel): a converted deepmd-kit model")
        present = torch.unique(types).tolist()
        kinds_used = sorted(set(present) | {t for t, n in enumerate(sel) if n > 0})
        key = (pos.device, tuple(kinds_used),
               tuple((t.data_ptr(), t._version) for t in network.state_dict().values()))
        if key != self._key:
            self._module = deepmd_module(to_deepmd(network, kinds_used)).to(pos.device)
            self._key = key
        lookup = torch.full((network.config.embedding_size,), -1, dtype=torch.long,
                            device=pos.device)
        lookup[torch.as_tensor(kinds_used, device=pos.device)] = torch.arange(
            len(kinds_used), device=pos.device)
        kinds = lookup.index_select(0, types)
        slots = [sel[t] for t in kinds_used]
        nlist, dropped = typed_neighbor_list(pos, kinds, graph, network.cutoff, slots)
        if dropped and not self._warned:
            self._warned = True
            warnings.warn(f"deepmd-kit drops {dropped} neighbours within the cutoff (a bead "
                          f"has more neighbours of a type than its slots, sel {slots} for "
                          f"bead types {kinds_used}): its energies differ from the engine's "
                          "path, which keeps them all; give the model more slots",
                          RuntimeWarning, stacklevel=2)
        coord = pos.to(network.fitting_out.dtype).reshape(1, -1)
        atomic = self._module.atomic_model.forward_common_atomic(coord, kinds[None], nlist[None])
        return atomic["energy"].reshape(-1).to(pos.dtype)
