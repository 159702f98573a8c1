"""What the master and the workers say to each other: the messages, the clock exchange."""
