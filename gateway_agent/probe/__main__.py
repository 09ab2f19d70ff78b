"""``python -m gateway_agent.probe serve|run``: the probe on a host without the agent."""

import sys

from gateway_agent.probe.run import main

sys.exit(main())
