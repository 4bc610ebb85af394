"""Kubernetes mode of the sweep DAG: the ``kubernetes:`` settings block of a sweep file
(``settings``, pydantic only: parsed with every sweep), the pod specs of the GPU stages
(``stage_pods``, imported only when a kubernetes sweep's DAG is built) and an offline dry run
that renders those pods through KubernetesPodOperator (``python -m components.k8s.dryrun``)."""
