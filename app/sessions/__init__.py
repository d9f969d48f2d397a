"""The sessions: each browser tab's state, the store that keeps tabs under a memory total, and Save / Load."""
