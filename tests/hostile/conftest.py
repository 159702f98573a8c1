"""The hostile server's `hostile` fixture for this folder (other folders import it the same way)."""

from hostile.hostile_server import hostile  # noqa: F401 - a fixture: importing it makes it available
