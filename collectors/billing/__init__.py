"""Pricing sources: the outside world (provider APIs, FOCUS exports) as cost records and rates."""
