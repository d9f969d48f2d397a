"""What the buttons and the /compare API do: runs and their call runner, views of a run, Save and Load."""
