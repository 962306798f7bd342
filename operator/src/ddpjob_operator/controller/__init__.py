"""The operator's loop against the API server: kopf handlers, the watch cache and relists, the work queue, one
reconcile pass, the applier that carries out its plan, expectations, leadership."""
