"""swarmx: the broadcast-reduce tree between MemoryX and the CS-2 systems.

Will model weight broadcast and gradient sum-reduction across data-parallel CS-2 systems, at
stream/transaction level. Status: not yet built.
"""
