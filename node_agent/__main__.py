from node_agent.cli import run

run()
