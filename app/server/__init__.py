"""The server: launch and flags, the limits a visitor is held to (the line of live runs, the shares, the disk,
uploads, saved-run ownership), the /compare API, the class pool and what the log and the replies say."""
