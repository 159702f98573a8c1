"""The one room that imports Locust: the session on the environment, the web UI, the hooks."""
