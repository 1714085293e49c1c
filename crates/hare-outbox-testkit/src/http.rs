//! A real HTTP receiver on loopback that records every request.
