package api

// FlushRefused ends the interval of the refused requests' log, as its
// timer does a minute after the first line it held back.
func (s *Server) FlushRefused() { s.refused.Flush() }
