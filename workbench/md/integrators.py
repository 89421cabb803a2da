"""Integrators for R replicas at once.

Positions and velocities have shape ``(R, n, 3)`` (Å, Å/ps), masses ``(n,)``
(amu), forces kcal/mol/Å. One force evaluation per step. Random numbers come
from a ``torch.Generator`` owned by the simulation, so runs are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from workbench.units import KB, KCAL_TO_AMU_A2_PS2

ForceFn = Callable[[torch.Tensor], torch.Tensor]


def as_temperatures(temperature: float | Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Validate temperatures (K) and return a float64 CPU tensor (scalar or per replica)."""
    t = torch.as_tensor(temperature, dtype=torch.float64).flatten()
    if t.numel() == 0:
        raise ValueError("no temperature given")
    if not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"temperatures must be positive and finite, got {t.tolist()}")
    return t


class Integrator:
    """Common interface: ``step(pos, vel, forces, masses, force_fn, generator)``.

    Parameters
    ----------
    timestep : float
        Δt in ps.
    """

    stochastic = False

    def __init__(self, timestep: float):
        if not (timestep > 0 and math.isfinite(timestep)):
            raise ValueError(f"time step must be positive, got {timestep} ps")
        self.timestep = float(timestep)

    def kick(self, vel: torch.Tensor, forces: torch.Tensor, inv_mass: torch.Tensor, h: float):
        """``v += h · F / m`` in place (``inv_mass`` already holds 418.4/m, shape (n, 1))."""
        vel.add_(forces * inv_mass, alpha=h)

    def step(
        self,
        pos: torch.Tensor,
        vel: torch.Tensor,
        forces: torch.Tensor,
        inv_mass: torch.Tensor,
        force_fn: ForceFn,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance one step; returns new ``(pos, vel, forces)``."""
        raise NotImplementedError

    def config(self) -> dict:
        """JSON-able parameters."""
        return {"type": type(self).__name__, "timestep": self.timestep}


class VelocityVerletIntegrator(Integrator):
    """NVE velocity Verlet (for energy-conservation checks)."""

    def step(self, pos, vel, forces, inv_mass, force_fn, generator):
        h = self.timestep
        vel = vel.clone()
        self.kick(vel, forces, inv_mass, 0.5 * h)
        pos = pos + h * vel
        forces = force_fn(pos)
        self.kick(vel, forces, inv_mass, 0.5 * h)
        return pos, vel, forces


class LangevinIntegrator(Integrator):
    """BAOAB Langevin dynamics with one force call per step.

    Parameters
    ----------
    timestep : float
        Δt in ps (4 fs = 0.004).
    friction : float
        γ in 1/ps.
    temperature : float or sequence of float
        Kelvin, one value for all replicas or one per replica.
    """

    stochastic = True

    def __init__(
        self,
        timestep: float = 0.004,
        friction: float = 1.0,
        temperature: float | Sequence[float] | torch.Tensor = 300.0,
    ):
        super().__init__(timestep)
        if not (friction >= 0 and math.isfinite(friction)):
            raise ValueError(f"friction must be non-negative, got {friction} 1/ps")
        self.friction = float(friction)
        self.temperature = as_temperatures(temperature)
        self._kt: torch.Tensor | None = None

    def set_temperature(self, temperature: float | Sequence[float] | torch.Tensor) -> None:
        """Change the bath temperature(s) between steps (K, scalar or one per replica).

        The device copy used by :meth:`step` is updated in place, so a captured CUDA
        graph sees the new values at its next replay.
        """
        new = as_temperatures(temperature)
        if self._kt is not None and new.numel() not in (1, self._kt.numel()):
            raise ValueError(
                f"{new.numel()} temperatures given for {self._kt.numel()} replicas"
            )
        self.temperature = new
        if self._kt is not None:
            self._kt.copy_((KB * new).to(self._kt.dtype).expand(self._kt.numel()))

    def thermal_energy(self, replicas: int, device, dtype) -> torch.Tensor:
        """k_B T per replica in kcal/mol, shape (R,), kept on ``device`` between steps."""
        kt = self._kt
        if kt is None or kt.device != torch.device(device) or kt.dtype != dtype \
                or kt.numel() != replicas:
            t = self.temperature
            t = t.expand(replicas) if t.numel() == 1 else t
            if t.numel() != replicas:
                raise ValueError(f"{t.numel()} temperatures given for {replicas} replicas")
            kt = self._kt = (KB * t).to(device=device, dtype=dtype).contiguous()
        return kt

    def thermal_velocity_scale(
        self, inv_mass: torch.Tensor, replicas: int, device, dtype
    ) -> torch.Tensor:
        """√(k_B T / m) in Å/ps, shape (R, n, 1)."""
        kt = self.thermal_energy(replicas, device, dtype)
        return torch.sqrt(kt[:, None, None] * inv_mass[None])

    def ou_coefficients(self) -> tuple[float, float]:
        """``(c1, c2) = (exp(−γ Δt), √(1 − c1²))`` of the Ornstein–Uhlenbeck update
        ``v ← c1 v + c2 √(k_B T / m) ξ``."""
        c1 = math.exp(-self.friction * self.timestep)
        return c1, math.sqrt(1.0 - c1 * c1)

    def step(self, pos, vel, forces, inv_mass, force_fn, generator):
        h = self.timestep
        c1, c2 = self.ou_coefficients()
        sigma = self.thermal_velocity_scale(inv_mass, pos.shape[0], pos.device, pos.dtype)
        vel = vel.clone()
        self.kick(vel, forces, inv_mass, 0.5 * h)
        pos = pos + 0.5 * h * vel
        noise = torch.randn(vel.shape, generator=generator, device=vel.device, dtype=vel.dtype)
        vel = c1 * vel + c2 * sigma * noise
        pos = pos + 0.5 * h * vel
        forces = force_fn(pos)
        self.kick(vel, forces, inv_mass, 0.5 * h)
        return pos, vel, forces

    def config(self) -> dict:
        return {
            **super().config(),
            "friction": self.friction,
            "temperature": self.temperature.tolist(),
        }


def maxwell_boltzmann(
    masses: torch.Tensor,
    temperature: torch.Tensor,
    replicas: int,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Velocities drawn from the Maxwell–Boltzmann distribution, shape (R, n, 3), Å/ps.

    Parameters
    ----------
    masses : torch.Tensor, shape (n,), amu
    temperature : torch.Tensor, shape () or (R,), K
    replicas : int
    generator : torch.Generator or None
    """
    t = temperature.to(device=masses.device, dtype=masses.dtype).reshape(-1)
    t = t.expand(replicas) if t.numel() == 1 else t
    if t.numel() != replicas:
        raise ValueError(f"{t.numel()} temperatures given for {replicas} replicas")
    scale = torch.sqrt(KB * t[:, None] * KCAL_TO_AMU_A2_PS2 / masses[None])[..., None]
    shape = (replicas, masses.shape[0], 3)
    return scale * torch.randn(shape, generator=generator, device=masses.device, dtype=masses.dtype)
