"""The master: the step controller and what it holds (the local runner runs it too)."""
