"""The admission layer: AdmissionReview wire types, JSONPatch encoding, the handler joining engine and
caches, and the aiohttp transport."""
