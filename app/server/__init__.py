"""The server's limits and defences, knowing nothing of the page: the line of live runs, the per-tab and per-address
shares, request bodies, uploads, the disk, saved-run ownership, the class pool and what the log and replies say."""
