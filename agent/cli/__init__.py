"""The command-line room: the ``gpuwatch`` parser and one module per command group.

The top of the flow: may import every room, and no room imports it.
"""
