"""Training of network potentials (CGSchNet, CGPaiNN, CGEGNN) on a structure-based teacher.

``data`` samples teacher frames and forces, ``boltzmann_inversion`` fits the priors,
``force_matching`` trains the network on teacher minus prior forces, ``model_card``
describes the result, ``validate`` compares a trained model with its teacher and
``pipeline`` runs all of it for ``workbench train``.
"""
