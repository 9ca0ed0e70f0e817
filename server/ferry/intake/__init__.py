"""Intake processes: the public front doors that serve inference and hand everything else to the core."""
