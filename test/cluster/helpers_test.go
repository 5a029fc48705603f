package cluster_test

import (
	"net/http"
	"strconv"
	"time"
)

// readyz returns the status of GET base/readyz (0 when unreachable).
func readyz(base string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func itoa(n int) string { return strconv.Itoa(n) }
