"""Local-first fleet: forwarding what the fleet's reports read from a box's own database to the
central PostgreSQL (:mod:`.streams` declares what, :mod:`.central` writes it, :mod:`.job` runs
it once a minute)."""
