"""The worker: schedules the arrivals, sends the requests, ships the records."""
