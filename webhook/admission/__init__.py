"""The admission layer: AdmissionReview wire types, the handler and the aiohttp transport.

Wire types and JSONPatch encoding (review.py, patch.py), the handler joining engine and caches
(handler.py, informer_lookups.py), and the HTTP server (server.py).
"""
