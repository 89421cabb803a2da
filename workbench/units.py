"""Physical units and constants shared by the engine.

The engine works in kcal/mol (energy), Å (length), ps (time), K (temperature)
and amu (mass). One kcal/mol equals 418.4 amu·Å²/ps², so an acceleration is
``force * KCAL_TO_AMU_A2_PS2 / mass``.
"""

#: Boltzmann constant in kcal/mol/K (the value the CGSchNet ecosystem uses).
KB = 0.0019872041

#: 1 kcal/mol expressed in amu·Å²/ps².
KCAL_TO_AMU_A2_PS2 = 418.4

#: Femtoseconds per picosecond.
FS_PER_PS = 1000.0


def beta_to_temperature(beta: float) -> float:
    """Convert an inverse temperature in mol/kcal to kelvin."""
    return 1.0 / (KB * beta)


def temperature_to_beta(temperature: float) -> float:
    """Convert a temperature in kelvin to an inverse temperature in mol/kcal."""
    return 1.0 / (KB * temperature)


def ns_per_day(timestep_mol_per_s: float, dt_fs: float) -> float:
    """Aggregate ns/day from timestep·mol/s and the time step in fs."""
    return timestep_mol_per_s * dt_fs * 0.0864
