"""The page's assembly and launch: the Demo and Evidence tabs, their wiring, the Blocks app, the ASGI serving and the
command line."""
