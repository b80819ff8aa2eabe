package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// selfSignedTLS makes the TLS configuration for `testbed mock --tls`: a
// fresh ECDSA P-256 key and a self-signed certificate valid for loopback
// (127.0.0.1, ::1, localhost) and the host being listened on. The
// certificate is its own CA, so a client trusts it by loading certPEM as a
// CA file (the harness's tls.ca_file / --ca-file); --insecure skips the
// check instead. ALPN offers h2 and http/1.1, so both HTTP versions can be
// measured over TLS.
func selfSignedTLS(host string, now time.Time) (cfg *tls.Config, certPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mock --tls: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, fmt.Errorf("mock --tls: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"testbed mock"}, CommonName: "testbed mock"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if ip == nil && host != "" && host != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("mock --tls: certificate: %w", err)
	}
	cfg = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// listenTLS wraps ln in TLS with a generated certificate and, when certOut
// is set, writes the certificate there for clients to trust.
func listenTLS(ln net.Listener, certOut string) (net.Listener, error) {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	cfg, certPEM, err := selfSignedTLS(host, time.Now())
	if err != nil {
		return nil, err
	}
	if certOut != "" {
		if err := os.WriteFile(certOut, certPEM, 0o644); err != nil {
			return nil, fmt.Errorf("mock: --tls-cert-out: %w", err)
		}
	}
	return tls.NewListener(ln, cfg), nil
}
