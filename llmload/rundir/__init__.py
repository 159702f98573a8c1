"""The run directory: its layout, plan.json, finalisation and recovery."""
