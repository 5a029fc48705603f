package webhooksink

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// CertLifetime is how long a certificate made by LoadOrCreateCert is valid.
const CertLifetime = 365 * 24 * time.Hour

// renewBefore: a certificate that expires sooner than this is made again.
const renewBefore = 24 * time.Hour

// LoopbackHosts are the names every certificate made here covers.
var LoopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// LoadOrCreateCert returns the certificate in certFile and keyFile (PEM) when
// both exist, parse, cover every host in hosts (IP addresses or DNS names)
// and stay valid for at least another day; otherwise it makes a new
// self-signed ECDSA P-256 certificate for LoopbackHosts and hosts, writes it
// there (the key with mode 0600) and reports created. The certificate is
// its own CA, so a client trusts it by adding certFile to its roots (the
// relay's --webhook-ca, curl's --cacert).
func LoadOrCreateCert(certFile, keyFile string, hosts []string, now time.Time) (cert tls.Certificate, created bool, err error) {
	cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err == nil && usable(cert.Leaf, hosts, now) {
		return cert, false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// A damaged pair is replaced; anything else (permissions) is reported.
		var perr *fs.PathError
		if errors.As(err, &perr) {
			return tls.Certificate{}, false, fmt.Errorf("webhook sink certificate: %w", err)
		}
	}
	certPEM, keyPEM, err := newSelfSigned(append(slices.Clone(LoopbackHosts), hosts...), now)
	if err != nil {
		return tls.Certificate{}, false, err
	}
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, false, err
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return tls.Certificate{}, false, err
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, false, fmt.Errorf("webhook sink certificate: %w", err)
	}
	return cert, true, nil
}

// usable reports whether leaf covers hosts and stays valid past renewBefore.
func usable(leaf *x509.Certificate, hosts []string, now time.Time) bool {
	if leaf == nil || now.Before(leaf.NotBefore) || now.Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	for _, h := range append(slices.Clone(LoopbackHosts), hosts...) {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newSelfSigned(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook sink key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("webhook sink certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Fleet demo webhook sink", Organization: []string{"Fleet demo"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CertLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook sink certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook sink key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// writeFile writes data to path through a temporary file and a rename, so a
// reader never sees half a file.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("webhook sink: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("webhook sink: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("webhook sink: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("webhook sink: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("webhook sink: %w", err)
	}
	return nil
}
