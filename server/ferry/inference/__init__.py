"""The inference core: one path for every request, whatever door it came through.

``path.RequestPath`` is that path (resolve → validate → pre-stages → schedule → post-stages), built
on ``path.FrontHalf`` (pre-stages, executions, post-stages), which intake processes run too;
``stages/`` holds each stage a model's config attaches (image input, classification, detection,
an ensemble's image results); ``validation`` checks requests against a model's config.
"""
