# Runs in the sandbox of SigV4Run's transparent-capture test: the aws CLI and a botocore-signed
# streaming upload (tests/proxy/sigv4_stream_client.py) with every proxy variable removed. They
# reach the upstream by name: sluice's DNS answers a synthetic address, the connection to it is
# captured, inspected and each request signed again with the real key.
unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy
host=s3.sigv4.test
endpoint="https://$host:$UPSTREAM_PORT"
mkdir -p /work/.aws
printf '[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n' > /work/.aws/config
export AWS_CONFIG_FILE=/work/.aws/config
echo "captured, not proxied" > /work/tp.txt
getent hosts "$host" | sed 's/^/resolved: /'
aws --endpoint-url "$endpoint" s3 cp /work/tp.txt s3://bucket/tp.txt > /dev/null && echo put-ok
aws --endpoint-url "$endpoint" s3 ls s3://bucket/ | grep -q tp.txt && echo ls-ok
aws --endpoint-url "$endpoint" s3 cp s3://bucket/tp.txt /work/back.txt > /dev/null &&
  cmp -s /work/tp.txt /work/back.txt && echo get-ok
python3 /input/client.py --direct --host "$host" --port "$UPSTREAM_PORT" --size 8388608 \
  --path /bucket/tp-stream.bin > /dev/null && echo stream-ok
AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY \
  aws --endpoint-url "$endpoint" s3 ls s3://wrongbucket/ > /dev/null 2>&1 || echo wrong-refused
exit 0
