package cluster_test

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// readyz returns the status of GET base/readyz (0 when unreachable).
func readyz(base string) int {
	code, _ := readyzBody(base)
	return code
}

// readyzBody returns the status and body of GET base/readyz (0 when
// unreachable).
func readyzBody(base string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }
