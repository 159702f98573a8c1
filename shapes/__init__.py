"""shapes package."""
