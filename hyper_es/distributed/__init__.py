"""Scale-out on Ray (`executor.kind: ray`): the gradient jobs as Ray tasks, and a pool of resident engine actors."""
