"""The collection room: one round of every collector, each in isolation, into a
:class:`~agent.collect.runner.Round`.

Imports only :mod:`agent.config` among the rooms.
"""
