"""The one synthesis pipeline every route uses: admission, request parameters, the first chunk, encoding, word timings and the HTTP endpoint on top."""
