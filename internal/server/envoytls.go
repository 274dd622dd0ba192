package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/countersign/countersign/internal/config"
)

// envoyCredentials are the Envoy listener's transport: mutual TLS when its
// files are set (Envoy must present a certificate that chains to the client
// CA), else none — a Unix socket guarded by its volume, or TCP under the
// loud override (config.Validate refuses anything else).
func envoyCredentials(cfg config.Config) (credentials.TransportCredentials, error) {
	if cfg.EnvoyTLSCert == "" {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.EnvoyTLSCert, cfg.EnvoyTLSKey)
	if err != nil {
		return nil, fmt.Errorf("envoy-tls-cert/envoy-tls-key: %w", err)
	}
	pem, err := os.ReadFile(cfg.EnvoyClientCA)
	if err != nil {
		return nil, fmt.Errorf("envoy-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("envoy-client-ca: no PEM certificate in " + cfg.EnvoyClientCA)
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}), nil
}
