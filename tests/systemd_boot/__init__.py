"""Booting Debian 12 with systemd-nspawn to run the shipped unit under a real systemd.

:mod:`tests.systemd_boot.host` prepares and boots the container; :mod:`inside` runs in it.
"""
