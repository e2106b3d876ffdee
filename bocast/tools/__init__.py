"""Around the loop: what reads finished runs and records (reports, suggestions with no
measurement, re-measurement), checks of the machinery (the RPC check, the Hopper
ladder), ablations and the configuration reference."""
