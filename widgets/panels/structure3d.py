"""3-D view of one replica (NGLView), updated in place while the run goes on; the PDB text
and the native-aligned coordinates it shows."""

from __future__ import annotations

import tempfile
import threading
import warnings
from pathlib import Path

import ipywidgets as ipw
import numpy as np
import torch

from widgets.panels.base import LivePanel
from widgets.snapshot import Snapshot
from workbench.analysis import superpose
from workbench.md.reporters import write_structure_pdb
from workbench.system.cg_system import CGSystem

with warnings.catch_warnings():
    # nglview 3.1.4 imports pkg_resources, which setuptools marks deprecated.
    warnings.simplefilter("ignore", UserWarning)
    warnings.simplefilter("ignore", DeprecationWarning)
    import nglview

#: Seconds to wait after the view reports "loaded" before framing the molecule and the
#: first push (NGL loads the structure asynchronously; coordinates sent before are dropped).
FIRST_PUSH_DELAY = 2.0


def _system_key(system: CGSystem) -> tuple:
    return system.name, system.mapping, system.n_beads


class Structure3D(LivePanel):
    """The chosen replica as beads and backbone, coloured by residue index.

    The structure is loaded once; afterwards only coordinates are sent
    (``view.set_coordinates``), superposed on the native structure so the molecule
    stays in view. The native structure can be shown underneath as a grey ghost.

    Parameters
    ----------
    controller : SimulationController, optional
    system : CGSystem, optional
        Shown (native coordinates) until a run provides its own.
    height : str
        CSS height of the view.
    refresh_interval : float
    """

    def __init__(
        self,
        controller=None,
        system: CGSystem | None = None,
        height: str = "420px",
        refresh_interval: float = 0.5,
    ):
        super().__init__(refresh_interval=refresh_interval)
        self.height = height
        self.replica = ipw.Dropdown(
            options=[("replica 0", 0)], value=0, description="replica", layout={"width": "180px"}
        )
        self.show_native = ipw.Checkbox(value=True, description="native (grey)", indent=False)
        self.align = ipw.Checkbox(value=True, description="superpose on native", indent=False)
        self.info = ipw.HTML()
        self.view: nglview.NGLWidget | None = None
        self.system: CGSystem | None = None
        self._pending: np.ndarray | None = None
        self.replica.observe(lambda _: self.refresh(), names="value")
        self.align.observe(lambda _: self.refresh(), names="value")
        self.show_native.observe(self._on_native, names="value")
        self._controls = ipw.VBox([self.replica, ipw.HBox([self.show_native, self.align])])
        self.set_body(self._controls, self.info)
        if system is not None:
            self.show_system(system)
        if controller is not None:
            self.attach(controller)

    def show_system(self, system: CGSystem) -> None:
        """Start a new view of ``system`` (native coordinates, plus its native ghost)."""
        view = nglview.NGLWidget()
        view.layout.height = self.height
        view.layout.width = "100%"
        pdb = structure_pdb_text(system)
        view.add_structure(nglview.TextStructure(pdb), default_representation=False)
        view.add_representation(
            "backbone", component=0, colorScheme="residueindex", radiusScale=0.6
        )
        view.add_representation(
            "ball+stick", component=0, colorScheme="residueindex", radius=0.25, aspectRatio=2.5
        )
        view.add_structure(nglview.TextStructure(pdb), default_representation=False)
        view.add_representation(
            "ball+stick", component=1, color="#9e9e9e", radius=0.12, aspectRatio=1.5, opacity=0.45
        )
        view.add_representation(
            "backbone", component=1, color="#9e9e9e", opacity=0.45, radiusScale=0.4
        )
        if not self.show_native.value:
            view[1].hide()
        view.observe(self._on_loaded, names="loaded")
        self.view = view
        self.system = system
        self._pending = None
        self.set_body(self._controls, view, self.info)
        self.info.value = f"{system.name}: {system.n_beads} beads, {system.n_residues} residues"

    def update(self, snapshot: Snapshot) -> None:
        """Show the chosen replica of ``snapshot`` (loading its system if it is new)."""
        if snapshot.system is None:
            return
        if self.system is None or _system_key(self.system) != _system_key(snapshot.system):
            self.show_system(snapshot.system)
        if len(self.replica.options) != snapshot.replicas:
            self.replica.options = [(f"replica {r}", r) for r in range(snapshot.replicas)]
        if snapshot.latest_positions is None:
            return
        replica = self.replica.value
        xyz = snapshot.latest_positions[replica]
        if self.align.value:
            xyz = aligned_to_native(xyz, self.system)
        self.push(np.ascontiguousarray(xyz, dtype=np.float32))
        self.info.value = (
            f"{self.system.name}, replica {replica}, step {snapshot.step} "
            f"({snapshot.step * snapshot.timestep_fs / 1000:.2f} ps)"
        )

    def push(self, xyz: np.ndarray) -> None:
        """Send bead coordinates ``(n, 3)`` to the view, or keep them until it has loaded."""
        if self.view is not None and self.view.loaded:
            self.view.set_coordinates({0: xyz})
        else:
            self._pending = xyz

    def _on_loaded(self, change) -> None:
        if change["new"]:
            timer = threading.Timer(FIRST_PUSH_DELAY, self._after_load, args=(change["owner"],))
            timer.daemon = True
            timer.start()

    def _after_load(self, view: nglview.NGLWidget) -> None:
        """Fit the stage to its final size, frame the molecule, then send held coordinates."""
        if view is not self.view:
            return
        view.handle_resize()
        view.center()
        pending, self._pending = self._pending, None
        if pending is not None:
            self.push(pending)

    def _on_native(self, change) -> None:
        if self.view is None or self.view.n_components < 2:
            return
        if change["new"]:
            self.view[1].show()
        else:
            self.view[1].hide()


def structure_pdb_text(system: CGSystem, positions: np.ndarray | None = None) -> str:
    """PDB text of the beads (one ATOM per bead, residues as in the source file).

    Parameters
    ----------
    system : CGSystem
    positions : numpy.ndarray, shape (n, 3), optional
        Å; the native structure by default.
    """
    coords = system.native_positions if positions is None else torch.as_tensor(positions)
    with tempfile.TemporaryDirectory(prefix="workbench-pdb-") as folder:
        path = write_structure_pdb(system, coords.detach().cpu(), Path(folder) / "beads.pdb")
        return path.read_text()


def aligned_to_native(positions: np.ndarray, system: CGSystem) -> np.ndarray:
    """One replica's bead coordinates ``(n, 3)`` superposed on the native structure, float32."""
    native = system.native_positions.detach().cpu().to(torch.float32)
    moved = superpose(torch.as_tensor(positions, dtype=torch.float32)[None], native)[0]
    return moved.numpy().astype(np.float32)
