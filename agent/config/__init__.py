"""The configuration room: the TOML file and the environment, read and checked into frozen values.

Every section has its module; :mod:`agent.config.settings` assembles them. Imports no other room.
"""
