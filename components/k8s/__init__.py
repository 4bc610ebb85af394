"""Kubernetes mode of the sweep DAG: the ``kubernetes:`` settings block of a sweep file
(``settings``, pydantic only: parsed with every sweep) and the pod specs of the GPU
stages (``pods``, imported only when a kubernetes sweep's DAG is built)."""
