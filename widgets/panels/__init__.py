"""The workbench panels; each works on its own or inside :class:`widgets.Workbench`."""
