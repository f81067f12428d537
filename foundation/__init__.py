"""The ground every other package stands on: the error type, text safe to print, credentials
out of URLs, and the one retry policy.

It imports nothing else of gpuwatch, so collectors, migrations, alerts and every room of the
agent can share these rules without reaching into each other.
"""
