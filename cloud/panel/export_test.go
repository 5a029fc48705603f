package panel

// FlushSignInLog ends the interval of the refused sign-ins' log, as its
// timer does a minute after the first line it held back.
func (s *Server) FlushSignInLog() { s.signInLog.Flush() }
