"""What the app remembers: each tab's session and its pools, the example recordings, this machine's measured speeds
and a visitor's checked settings."""
