"""Neighbour lists over many replicas."""

from workbench.neighbors.neighbor_list import Graph, NeighborList, NeighborListOverflow

__all__ = ["Graph", "NeighborList", "NeighborListOverflow"]
