"""Recipe files: ``workbench train --config FILE``, flags given overriding the file."""

from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.cli.main import parse_arguments
from workbench.cli.train import train_options

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))

RECIPE = """\
protein: 2jof
generate: true
temperatures: [300, 360]
batch-size: 64
lr: 5.0e-4
noise: [0.1, 0.2]
refine_priors: true
tf32: true
"""
FLAGS = ["--protein", "2jof", "--generate", "--temperatures", "300,360", "--batch-size", "64",
         "--lr", "5e-4", "--noise", "0.1,0.2", "--refine-priors", "--tf32"]


def parsed(argv: list[str]) -> dict:
    args = vars(parse_arguments(argv))
    args.pop("config")
    return args


def test_a_recipe_parses_as_its_flags_do(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    from_file = parsed(["train", "--config", str(recipe), "--out", "o"])
    assert from_file == parsed(["train", *FLAGS, "--out", "o"])
    assert from_file["batch_size"] == 64 and from_file["noise"] == "0.1,0.2"
    assert from_file["tf32"] is True and from_file["refine_priors"] is True


def test_flags_override_the_recipe(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    args = parsed(["train", "--lr", "1e-3", "--config", str(recipe), "--data", "d.pt",
                   "--out", "o"])
    assert args["lr"] == 1e-3 and args["batch_size"] == 64
    assert parsed(["train", "--config", str(recipe), "--no-tf32", "--out", "o"])["tf32"] is False
    # --data and the recipe's generate exclude each other: the command line's wins
    assert args["data"] == "d.pt" and args["generate"] is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("protein: 2jof\nwarp_factor: 9\n", "has the key 'warp_factor'"),
        ("generate: yes please\n", "generate is a switch"),
        ("- a list\n", "is not a mapping"),
    ],
)
def test_bad_recipes_are_refused_naming_the_key(tmp_path, capsys, text, message):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    assert main(["train", "--config", str(recipe), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --config") and message in err
    assert not (tmp_path / "o").exists()


def test_a_missing_recipe_is_a_usage_error(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "none.yaml"), "--out", "o"]) == 2
    assert "cannot read the recipe" in capsys.readouterr().err


def test_every_shipped_recipe_parses_and_its_options_go_together():
    assert {path.stem for path in RECIPES} == {"cln025", "2jof", "1yrf", "1enh", "2a3d",
                                               "cln025-dp", "cln025-painn", "cln025-egnn",
                                               "cln025-nequip"}
    for path in RECIPES:
        args = parse_arguments(["train", "--config", str(path), "--out", "o"])
        # <protein>.yaml, or <protein>-<architecture>.yaml for a line of another network
        protein, _, architecture = path.stem.partition("-")
        assert args.protein == protein and args.generate, path
        assert (args.arch or "schnet") == (architecture or "schnet"), path
        train_options(args)  # raises SettingsError where options contradict each other


#: The kernels of the long validation runs the recipes of other architectures name: the
#: fastest path measured for their networks.
LONG_RUN_KERNELS = "fused_message_passing+cuda_graph+fused_pair_search+fused_integrator-fp16"

# a GPU, or the Triton interpreter on a CPU (tests/conftest.py)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


#: The long validation run's kernels of the tensor-product network: OpenEquivariance's
#: convolution (``--tp-backend openequivariance``, the backend whose steps are captured)
#: with the radial MLPs in 16 bits.
NEQUIP_LONG_RUN_KERNELS = "tabulated_filter+cuda_graph+fused_pair_search+fused_integrator"


def recipe_network(architecture: str, long_run: str = LONG_RUN_KERNELS) -> torch.nn.Module:
    """The untrained network of ``recipes/cln025-<architecture>.yaml``, after checking what
    every CLN025 recipe of another architecture shares: data and training within eight
    minutes, the CGSchNet recipe's teacher, data and priors, the displaced frames new
    models are trained with, and a long run on the kernels ``long_run``."""
    from workbench.model.architectures import build_network

    path = ROOT / "recipes" / f"cln025-{architecture}.yaml"
    args = parse_arguments(["train", "--config", str(path), "--out", "o"])
    schnet = parse_arguments(["train", "--config", str(ROOT / "recipes" / "cln025.yaml"),
                              "--out", "o"])
    assert args.wall_limit <= 8 * 60 and args.time_limit < args.wall_limit
    for key in ("epsilon", "temperatures", "replicas", "steps", "save_every",
                "equilibration", "energy_weight"):
        assert getattr(args, key) == getattr(schnet, key), key
    assert args.repulsion == "cutoff"  # the wall the shipped model's card records
    assert args.noise == "0.1,0.2" and args.sampler_max_force == 300  # decision 0007
    assert args.arch == architecture
    assert f"--kernels {long_run} " in path.read_text()  # the comment's long run
    return build_network(architecture, train_options(args).network_config)


def parameter_bytes(network: torch.nn.Module) -> int:
    """The bytes of a network's float32 parameters, most of the file it ships as."""
    return sum(p.numel() for p in network.parameters()) * 4


@pytest.mark.parametrize("kernels", ["fused_message_passing+tabulated_filter", LONG_RUN_KERNELS])
def test_the_deep_potential_recipe_fits_one_gpu_call_and_the_fused_kernel(kernels):
    """recipes/cln025-dp.yaml: a network that the fused descriptor kernel runs."""
    from workbench.model.deep_potential import fused_descriptor_problem
    from workbench.model.options import KernelOptions

    network = recipe_network("dp")
    assert fused_descriptor_problem(network, DEVICE, KernelOptions.parse(kernels)) is None
    assert network.config.embedding_widths[-1] == 32 and network.config.type_one_side
    # the file it ships as stays small (one embedding network per neighbour type)
    assert parameter_bytes(network) < 0.7e6


@pytest.mark.parametrize("kernels", ["fused_message_passing", LONG_RUN_KERNELS])
def test_the_painn_recipe_fits_one_gpu_call_the_size_budget_and_the_fused_kernel(kernels):
    """recipes/cln025-painn.yaml: a network that the fused message kernel runs, in FP32 and
    in the long run's 16-bit operands, and a file of at most 0.35 MB with the priors."""
    from workbench.model.options import KernelOptions
    from workbench.model.painn import fused_message_problem

    network = recipe_network("painn")
    assert fused_message_problem(network, DEVICE, KernelOptions.parse(kernels)) is None
    assert network.config.hidden == 32 and network.config.cutoff == 10.0
    assert parameter_bytes(network) < 0.32e6  # the priors take about 0.03 MB more


@pytest.mark.parametrize("kernels", ["fused_message_passing", LONG_RUN_KERNELS])
def test_the_egnn_recipe_fits_one_gpu_call_the_size_budget_and_the_fused_kernel(kernels):
    """recipes/cln025-egnn.yaml: a network that the fused edge kernel runs, in FP32 and in
    the long run's 16-bit operands, and a file of at most 0.35 MB with the priors."""
    from workbench.model.egnn import fused_edge_problem
    from workbench.model.options import KernelOptions

    network = recipe_network("egnn")
    assert fused_edge_problem(network, DEVICE, KernelOptions.parse(kernels)) is None
    assert network.config.edge_width == 64 and network.config.cutoff == 10.0
    assert parameter_bytes(network) < 0.32e6  # the priors take about 0.03 MB more


def test_a_mapping_in_a_recipe_is_the_option_written_as_json(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("arch: painn\nnetwork:\n  hidden: 64\n  output_widths: [32]\n")
    args = parse_arguments(["train", "--config", str(recipe), "--generate", "--out", "o"])
    assert args.arch == "painn" and args.network == '{"hidden": 64, "output_widths": [32]}'
    assert train_options(args).network_config.output_widths == [32]


@pytest.mark.parametrize("kernels", ["fused_update", NEQUIP_LONG_RUN_KERNELS])
def test_the_nequip_recipe_fits_one_gpu_call_the_size_budget_and_the_fused_kernel(kernels):
    """recipes/cln025-nequip.yaml: radial MLPs that the packed linear kernel runs and radial
    tables that the table read kernel runs, one multiplicity for every irrep
    (cuEquivariance's CUDA kernel), the long run on OpenEquivariance's convolution, and a
    file of at most 0.2 MB with the priors."""
    from workbench.model.options import KernelOptions
    from workbench.model.tensor_product import fused_radial_problem

    network = recipe_network("nequip", NEQUIP_LONG_RUN_KERNELS)
    assert fused_radial_problem(network, DEVICE, KernelOptions.parse(kernels)) is None
    from e3nn import o3

    assert len({mul for mul, _ in o3.Irreps(network.config.irreps)}) == 1
    assert network.config.cutoff == 10.0
    text = (ROOT / "recipes" / "cln025-nequip.yaml").read_text()
    assert "--tp-backend openequivariance" in text
    assert parameter_bytes(network) < 0.18e6  # the priors take about 0.01 MB more
